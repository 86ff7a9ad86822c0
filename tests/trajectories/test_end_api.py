"""Ending a session by hand or from a back-end: `POST /api/v1/trajectories/<id>/end/`, the lifecycle read
`GET <id>/lifecycle/` and the console's button. An ended trajectory answers 409 and stays as it was;
another tenant's is a 404; roles without `trajectory.end` get 403 and change nothing."""

import pytest
from django.test import Client

from apps.audit.models import AuditEvent
from apps.tenants.permissions import Role
from apps.trajectories.models import EndReason, Trajectory, TrajectoryStatus
from apps.trajectories.services import steps_ingest, trajectory_end
from tests.trajectories.builders import gateway_step, ingested
from workers.atdp import validate_trajectory

pytestmark = pytest.mark.django_db

LIST = "/api/v1/trajectories/"


def _end(trajectory) -> str:
    return f"{LIST}{trajectory.pk}/end/"


def _lifecycle(trajectory) -> str:
    return f"{LIST}{trajectory.pk}/lifecycle/"


def _state(trajectory) -> tuple:
    trajectory.refresh_from_db()
    return trajectory.status, trajectory.ended_at, trajectory.end_reason, trajectory.step_count


@pytest.fixture
def live(tenant):
    return ingested(tenant, "live", [gateway_step(tenant, "live"), gateway_step(tenant, "live")])


@pytest.fixture
def theirs(other_tenant):
    return ingested(other_tenant, "theirs", [gateway_step(other_tenant, "theirs")])


def test_an_operator_ends_an_open_session_and_a_second_end_is_a_conflict(api_client, member, live, theirs):
    operator = api_client(user=member(Role.OPERATOR))

    response = operator.post(_end(live), format="json")

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["trajectory_id"] == str(live.pk)
    assert (body["status"], body["end_reason"], body["step_count"]) == ("complete", "api", 2)
    assert body["ended_at"] is not None
    assert (body["continues"], body["continued_by"]) == (None, None)
    status, ended_at, end_reason, _ = _state(live)
    assert (status, end_reason) == (TrajectoryStatus.COMPLETE, EndReason.API)
    assert ended_at.isoformat().replace("+00:00", "Z") == body["ended_at"]
    event = AuditEvent.objects.get(tenant=live.tenant, verb="trajectory.end")
    assert event.target_id == str(live.pk)
    assert event.data == {"status": "complete", "reason": "api", "steps": 2}

    before = _state(live)
    again = operator.post(_end(live), format="json")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "trajectory_already_ended"
    assert "already ended (api)" in again.json()["error"]["message"]
    assert _state(live) == before
    assert AuditEvent.objects.filter(tenant=live.tenant, verb="trajectory.end").count() == 1
    assert _state(theirs)[0] == TrajectoryStatus.OPEN


def test_an_agent_ended_session_is_a_conflict_too(api_client, tenant, live):
    trajectory_end(tenant=tenant, trajectory_id=live.pk)  # /rl/end_session's path
    before = _state(live)

    response = api_client(["trajectories:write"]).post(_end(live), format="json")

    assert response.status_code == 409
    assert "already ended (agent)" in response.json()["error"]["message"]
    assert _state(live) == before


def test_another_tenants_trajectory_is_not_found_and_stays_open(api_client, member, live, theirs):
    before = _state(theirs)
    operator = api_client(user=member(Role.OPERATOR))

    assert operator.post(_end(theirs), format="json").status_code == 404
    assert api_client(["trajectories:write"]).post(_end(theirs), format="json").status_code == 404
    assert operator.get(_lifecycle(theirs)).status_code == 404
    assert _state(theirs) == before
    assert not AuditEvent.objects.filter(verb="trajectory.end").exists()


@pytest.mark.parametrize(
    ("role", "allowed"),
    [(Role.ADMIN, True), (Role.OPERATOR, True), (Role.ANNOTATOR, False), (Role.VIEWER, False)],
)
def test_who_may_end_a_session(api_client, member, live, role, allowed):
    before = _state(live)

    response = api_client(user=member(role)).post(_end(live), format="json")

    if allowed:
        assert response.status_code == 200
        assert _state(live)[0] == TrajectoryStatus.COMPLETE
    else:
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "role_forbidden"
        assert _state(live) == before


def test_a_key_needs_the_trajectories_write_scope(api_client, live):
    before = _state(live)

    response = api_client(["trajectories:read"]).post(_end(live), format="json")

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "scope_missing"
    assert _state(live) == before


def test_the_lifecycle_shows_why_it_ended_and_its_continuation(api_client, tenant, live, theirs):
    trajectory_end(tenant=tenant, trajectory_id=live.pk)
    steps_ingest(records=[gateway_step(tenant, "live")])  # a late step
    continuation = Trajectory.objects.get(tenant=tenant, continues=live)
    reader = api_client(["trajectories:read"])

    ended = reader.get(_lifecycle(live)).json()
    following = reader.get(_lifecycle(continuation)).json()

    assert (ended["status"], ended["end_reason"], ended["step_count"]) == ("complete", "agent", 2)
    assert ended["continued_by"] == str(continuation.pk)
    assert ended["last_activity_at"] is not None
    assert (following["session_id"], following["status"], following["end_reason"]) == ("live~2", "open", "")
    assert following["continues"] == str(live.pk)
    assert following["continued_by"] is None
    detail = reader.get(f"{LIST}{live.pk}/").json()  # the ATDP record itself is unchanged
    assert validate_trajectory(detail) == []
    assert "end_reason" not in detail


# ---------------------------------------------------------------------------------------------- console


def _console(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_console_button_ends_the_session_for_an_operator(member, live):
    operator = _console(member(Role.OPERATOR))
    page = operator.get(f"/trajectories/{live.pk}/")
    assert page.status_code == 200
    assert b"End session" in page.content
    assert b"(open)" in page.content

    response = operator.post(f"/trajectories/{live.pk}/end/", follow=True)

    assert response.status_code == 200
    assert _state(live)[:3:2] == (TrajectoryStatus.COMPLETE, EndReason.API)
    assert b"Session ended" in response.content
    assert b"api: Ended through the end API or the console" in response.content
    assert b"End session</button>" not in response.content
    repeat = operator.post(f"/trajectories/{live.pk}/end/", follow=True)
    assert b"already ended (api)" in repeat.content


def test_the_console_hides_the_button_from_viewers_and_refuses_their_post(member, live):
    viewer = _console(member(Role.VIEWER))
    before = _state(live)

    assert b"End session</button>" not in viewer.get(f"/trajectories/{live.pk}/").content
    assert viewer.post(f"/trajectories/{live.pk}/end/").status_code == 403
    assert _state(live) == before


def test_the_console_answers_404_for_another_tenants_trajectory(member, theirs):
    before = _state(theirs)

    response = _console(member(Role.OPERATOR)).post(f"/trajectories/{theirs.pk}/end/")

    assert response.status_code == 404
    assert _state(theirs) == before


def test_the_console_links_a_continuation_both_ways(member, tenant, live):
    trajectory_end(tenant=tenant, trajectory_id=live.pk)
    steps_ingest(records=[gateway_step(tenant, "live")])
    continuation = Trajectory.objects.get(tenant=tenant, continues=live)
    client = _console(member(Role.VIEWER))

    ended_page = client.get(f"/trajectories/{live.pk}/").content.decode()
    continuation_page = client.get(f"/trajectories/{continuation.pk}/").content.decode()

    assert f"/trajectories/{continuation.pk}/" in ended_page
    assert "Continued by" in ended_page
    assert f"/trajectories/{live.pk}/" in continuation_page
    assert "Continues" in continuation_page
