"""Rewards addressed by session id after the session's trajectory ended (idle timeout) and a late step went
on in its continuation `<session>~2`: they go to the live continuation, not to the ended trajectory. A
reward that names an interaction (a step) stays with that step's own trajectory."""

import uuid
from datetime import timedelta

import httpx
import openai
import pytest
from django.utils import timezone

from apps.rewards.models import Reward
from apps.trajectories.lifecycle import trajectories_close_idle
from apps.trajectories.models import Step, Trajectory, TrajectoryStatus
from tests.gateway.conftest import MODEL
from tests.gateway.helpers import drain

pytestmark = pytest.mark.django_db(transaction=True)


def _bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def _ask(base_url: str, key: str, text: str):
    client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    return client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": text}], max_tokens=4
    )


def _idle_closed(trajectory: Trajectory) -> None:
    """Closes the trajectory as the beat task does once its session was idle past the timeout."""
    moment = timezone.now() - timedelta(hours=1)
    Trajectory.objects.filter(pk=trajectory.pk).update(started_at=moment)
    Step.objects.filter(trajectory=trajectory).update(created_at=moment)
    trajectories_close_idle(tenant=trajectory.tenant)
    trajectory.refresh_from_db()
    assert trajectory.status == TrajectoryStatus.COMPLETE


def _continued_session(url, gw, key, tenant) -> tuple[dict, Trajectory, Trajectory, str, str]:
    """(the started session, its ended first trajectory, its live continuation, the first trajectory's step,
    the continuation's step)."""
    started = httpx.post(f"{url}/rl/start_session", json={"task_id": "late"}, headers=_bearer(key)).json()
    early = _ask(url, started["api_key"], "first")
    drain(gw)
    ended = Trajectory.objects.get(tenant=tenant, session_id=started["session_id"])
    _idle_closed(ended)
    late = _ask(url, started["api_key"], "later")  # the session key still works: the agent went on
    drain(gw)
    continuation = Trajectory.objects.get(tenant=tenant, continues=ended)
    assert continuation.session_id == f"{started['session_id']}~2"
    assert Step.objects.get(pk=late.id).trajectory_id == continuation.pk
    return started, ended, continuation, early.id, late.id


def test_set_reward_and_end_session_of_a_continued_session_reach_the_continuation(
    gateway, backend, agent_key, tenant
):
    url, gw = gateway
    started, ended, continuation, early, late = _continued_session(url, gw, agent_key("inference"), tenant)
    session_key = _bearer(started["api_key"])

    # no interaction named: the session's last completion, in the live continuation
    last = httpx.post(f"{url}/rl/set_reward", json={"reward": 1.0}, headers=session_key)
    assert last.status_code == 200, last.text
    assert last.json()["interaction_id"] == late
    assert Reward.objects.get(pk=last.json()["reward_id"]).trajectory_id == continuation.pk
    # an interaction named: pinned to its own trajectory, the ended one (within the late-reward window)
    pinned = httpx.post(
        f"{url}/rl/set_reward", json={"reward": 0.5, "interaction_id": early}, headers=session_key
    )
    assert pinned.status_code == 200, pinned.text
    assert Reward.objects.get(pk=pinned.json()["reward_id"]).trajectory_id == ended.pk
    # end_session ends the continuation, its final reward on the continuation's last completion
    closed = httpx.post(f"{url}/rl/end_session", json={"final_reward": 0.75}, headers=session_key)
    assert closed.status_code == 200, closed.text
    assert closed.json()["final_reward"]["step_id"] == late
    assert (closed.json()["steps"], closed.json()["interaction_count"]) == (1, 1)
    final = Reward.objects.get(pk=closed.json()["final_reward"]["reward_id"])
    assert (final.trajectory_id, final.timing) == (continuation.pk, "terminal")
    continuation.refresh_from_db()
    assert (continuation.status, continuation.end_reason) == (TrajectoryStatus.COMPLETE, "agent")
    assert Trajectory.objects.get(pk=ended.pk).end_reason == "idle"  # left as the idle close left it
    after = httpx.post(f"{url}/rl/set_reward", json={"reward": 1.0}, headers=session_key)
    assert after.status_code == 410


def test_v1_rewards_by_session_id_reach_the_continuation_and_by_step_its_own_trajectory(
    gateway, backend, agent_key, tenant, other_tenant
):
    url, gw = gateway
    key = agent_key("inference", "rewards:write")
    started, ended, continuation, early, late = _continued_session(url, gw, key, tenant)

    by_session = httpx.post(
        f"{url}/v1/rewards",
        json={"session_id": started["session_id"], "value": 0.25, "source": "user"},
        headers=_bearer(key),
    )
    assert by_session.status_code == 201, by_session.text
    assert (by_session.json()["trajectory_id"], by_session.json()["target"]) == (
        str(continuation.pk),
        "trajectory",
    )
    by_step = httpx.post(
        f"{url}/v1/rewards", json={"step_id": early, "value": 0.5, "source": "user"}, headers=_bearer(key)
    )
    assert by_step.status_code == 201, by_step.text
    assert by_step.json()["trajectory_id"] == str(ended.pk)
    # naming the continuation itself is the same session: its newest trajectory
    by_continuation = httpx.post(
        f"{url}/v1/rewards",
        json={"session_id": continuation.session_id, "value": 1, "source": "user"},
        headers=_bearer(key),
    )
    assert by_continuation.json()["trajectory_id"] == str(continuation.pk)

    # another tenant's key finds no such session, and its own session of that name is its own
    foreign_key = agent_key("inference", "rewards:write", of=other_tenant)
    foreign = httpx.post(
        f"{url}/v1/rewards",
        json={"session_id": started["session_id"], "value": 1},
        headers=_bearer(foreign_key),
    )
    assert (foreign.status_code, foreign.json()["error"]["code"]) == (404, "session_not_found")
    foreign_set = httpx.post(
        f"{url}/v1/{started['session_id']}/rl/set_reward", json={"reward": 1}, headers=_bearer(foreign_key)
    )
    assert (foreign_set.status_code, foreign_set.json()["error"]["code"]) == (404, "session_not_found")
    assert {str(row.trajectory_id) for row in Reward.objects.filter(tenant=tenant)} == {
        str(continuation.pk),
        str(ended.pk),
    }
    assert not Reward.objects.filter(tenant=other_tenant).exists()
    assert uuid.UUID(late) in set(Step.objects.filter(trajectory=continuation).values_list("id", flat=True))
