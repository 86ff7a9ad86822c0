"""The training queue and review pages in the console, with a second tenant's rows planted."""

import pytest

from apps.audit.models import AuditEvent
from apps.qualification.models import Qualification, Review
from apps.qualification.services import qualification_evaluate
from apps.tenants.permissions import Role
from tests.trajectories.factories import TrajectoryFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def judged(tenant, other_tenant, good_trajectory):
    rows = {
        "qualified": good_trajectory(agent_name="helper", task_id="t1", group_id="g1"),
        "eval": good_trajectory(purpose="eval"),
        "theirs": TrajectoryFactory(tenant=other_tenant, agent_name="theirs", purpose="replay"),
    }
    for trajectory in rows.values():
        qualification_evaluate(trajectory_id=trajectory.pk)
    return rows


def test_training_queue_links_each_reason_to_its_trajectories(client, member, judged):
    client.force_login(member(Role.VIEWER))
    page = client.get("/training-queue/")
    assert page.status_code == 200
    body = page.content.decode()
    assert 'id="waiting-total">1<' in body
    assert "helper" in body
    assert "theirs" not in body
    assert 'data-code="purpose_production"' in body
    assert 'data-code="has_training_reward"' not in body  # only the other tenant's trajectory lacks a reward
    listing = client.get("/training-queue/trajectories/?status=disqualified&reason=purpose_production")
    rows = listing.content.decode()
    assert str(judged["eval"].pk) in rows
    assert str(judged["qualified"].pk) not in rows
    assert str(judged["theirs"].pk) not in rows
    qualified = client.get(
        "/training-queue/trajectories/?status=qualified&agent=helper&task_id=t1&group_id=g1"
    )
    assert str(judged["qualified"].pk) in qualified.content.decode()


def test_review_page_roles_and_isolation(client, member, tenant, judged):
    client.force_login(member(Role.ANNOTATOR))
    trajectory = judged["qualified"]
    page = client.get(f"/trajectories/{trajectory.pk}/review/")
    assert page.status_code == 200
    assert 'id="review-form"' not in page.content.decode()
    denied = client.post(
        f"/trajectories/{trajectory.pk}/review/submit/", {"status": "rejected", "note": "no"}
    )
    assert denied.status_code == 403
    assert not Review.objects.exists()
    denied = client.post(
        f"/trajectories/{trajectory.pk}/review/override/", {"status": "disqualified", "reason": "x"}
    )
    assert denied.status_code == 403
    assert Qualification.objects.get(trajectory=trajectory).status == "qualified"
    assert client.get(f"/trajectories/{judged['theirs'].pk}/review/").status_code == 404

    client.force_login(member(Role.OPERATOR))
    assert 'id="override-form"' in client.get(f"/trajectories/{trajectory.pk}/review/").content.decode()
    client.post(f"/trajectories/{trajectory.pk}/review/submit/", {"status": "needs_changes", "note": "tone"})
    assert Review.objects.get(trajectory=trajectory).status == "needs_changes"
    client.post(
        f"/trajectories/{trajectory.pk}/review/override/", {"status": "disqualified", "reason": "bad tone"}
    )
    row = Qualification.objects.get(trajectory=trajectory)
    assert (row.status, row.override_reason) == ("disqualified", "bad tone")
    assert (
        AuditEvent.objects.filter(
            tenant=tenant, verb__in=["trajectory.review", "qualification.override"]
        ).count()
        == 2
    )
    assert (
        client.post(
            f"/trajectories/{judged['theirs'].pk}/review/override/", {"status": "qualified", "reason": "x"}
        ).status_code
        == 404
    )
    assert Qualification.objects.get(trajectory=judged["theirs"]).override_status == ""
