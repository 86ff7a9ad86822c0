"""Sessions an unmodified openai-SDK agent ends without session calls: `X-Session-End` on its last request
(the step is stored and the trajectory ended before the answer comes back), and the tenant's idle timeout;
a step that arrives afterwards goes to a continuation and leaves the ended trajectory as it was."""

from datetime import timedelta

import openai
import pytest
from django.utils import timezone

from apps.tenants.models import TenantPolicy
from apps.trajectories.models import EndReason, Step, Trajectory, TrajectoryStatus
from apps.trajectories.tasks import close_idle_trajectories
from tests.gateway.conftest import MODEL
from tests.gateway.helpers import drain

pytestmark = pytest.mark.django_db(transaction=True)


def sdk(url, key, **kwargs):
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, **kwargs)


def _ask(client, text: str, **kwargs):
    return client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": text}], max_tokens=3, temperature=0, **kwargs
    )


def _ended(trajectory: Trajectory) -> tuple:
    trajectory.refresh_from_db()
    return trajectory.status, trajectory.ended_at, trajectory.end_reason, trajectory.step_count


def test_the_end_header_ends_the_session_before_the_answer_is_released(gateway, backend, agent_key, tenant):
    url, gw = gateway
    client = sdk(url, agent_key("inference"), default_headers={"X-Session-Id": "finishing"})
    first = _ask(client, "one")

    last = _ask(client, "two", extra_headers={"X-Session-End": "true"})

    # No drain: the step was flushed and the trajectory ended before the SDK got the answer.
    trajectory = Trajectory.objects.get(tenant=tenant, session_id="finishing")
    assert (trajectory.status, trajectory.end_reason) == (TrajectoryStatus.COMPLETE, EndReason.SIGNAL)
    assert trajectory.ended_at is not None
    assert list(
        Step.objects.filter(trajectory=trajectory).order_by("index").values_list("id", flat=True)
    ) == [
        Step.objects.get(pk=first.id).pk,
        Step.objects.get(pk=last.id).pk,
    ]
    assert trajectory.step_count == 2
    before = _ended(trajectory)

    late = _ask(client, "three")  # the agent carries on under the ended session id
    drain(gw)

    assert _ended(trajectory) == before
    continuation = Trajectory.objects.get(tenant=tenant, session_id="finishing~2")
    assert continuation.continues_id == trajectory.pk
    assert continuation.status == TrajectoryStatus.OPEN
    assert Step.objects.get(pk=late.id).trajectory_id == continuation.pk


def test_the_end_header_on_a_stream_of_a_prefix_attributed_session(gateway, backend, agent_key, tenant):
    url, gw = gateway
    client = sdk(url, agent_key("inference"))
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Count"}],
        max_tokens=6,
        temperature=0,
        stream=True,
        extra_headers={"X-Session-End": "1"},
    )
    session_id = raw.headers["x-session-id"]

    chunks = list(raw.parse())

    trajectory = Trajectory.objects.get(tenant=tenant, session_id=session_id)
    assert (trajectory.status, trajectory.end_reason, trajectory.step_count) == ("complete", "signal", 1)
    assert Step.objects.get(pk=chunks[0].id).trajectory_id == trajectory.pk


def test_the_end_header_set_to_false_leaves_the_session_open(gateway, backend, agent_key, tenant):
    url, gw = gateway
    client = sdk(url, agent_key("inference"), default_headers={"X-Session-Id": "going-on"})

    _ask(client, "one", extra_headers={"X-Session-End": "false"})
    drain(gw)

    trajectory = Trajectory.objects.get(tenant=tenant, session_id="going-on")
    assert (trajectory.status, trajectory.end_reason) == (TrajectoryStatus.OPEN, "")


def test_a_bad_end_header_is_refused_before_anything_is_recorded(gateway, backend, agent_key, tenant):
    url, gw = gateway
    client = sdk(url, agent_key("inference"), default_headers={"X-Session-Id": "unclear"})

    with pytest.raises(openai.BadRequestError) as refused:
        _ask(client, "one", extra_headers={"X-Session-End": "maybe"})

    assert refused.value.status_code == 400
    assert refused.value.body["param"] == "X-Session-End"
    assert "true or 1" in refused.value.body["message"]
    drain(gw)
    assert not Trajectory.objects.filter(tenant=tenant).exists()


def test_after_the_idle_timeout_the_next_step_goes_to_a_continuation(gateway, backend, agent_key, tenant):
    url, gw = gateway
    TenantPolicy.objects.filter(tenant=tenant).update(session_idle_seconds=300)
    client = sdk(url, agent_key("inference"), default_headers={"X-Session-Id": "slow-agent"})
    _ask(client, "one")
    drain(gw)
    trajectory = Trajectory.objects.get(tenant=tenant, session_id="slow-agent")
    quiet_since = timezone.now() - timedelta(seconds=301)
    Trajectory.objects.filter(pk=trajectory.pk).update(started_at=quiet_since)
    Step.objects.filter(trajectory=trajectory).update(created_at=quiet_since)

    assert close_idle_trajectories() == {tenant.slug: {"closed": 1, "remaining": 0, "idle_seconds": 300}}
    before = _ended(trajectory)
    assert before[0::2] == (TrajectoryStatus.COMPLETE, EndReason.IDLE)

    late = _ask(client, "two")
    drain(gw)

    assert _ended(trajectory) == before
    continuation = Trajectory.objects.get(tenant=tenant, continues=trajectory)
    assert continuation.session_id == "slow-agent~2"
    assert Step.objects.get(pk=late.id).trajectory_id == continuation.pk
