"""An AReaL-style client, unchanged: start_session → calls with the session key → set_reward → end_session."""

import httpx
import openai
import pytest

from apps.rewards.models import Reward
from apps.trajectories.models import Step, Trajectory
from tests.gateway.conftest import MODEL

pytestmark = pytest.mark.django_db(transaction=True)


def test_areal_session_lifecycle(gateway, backend, agent_key, tenant):
    url, gw = gateway
    key = agent_key("inference")
    started = httpx.post(
        f"{url}/rl/start_session",
        json={"task_id": "math-1", "group_size": 2},
        headers={"Authorization": f"Bearer {key}"},
    ).json()
    assert started["group_id"] == "math-1#0"
    assert started["api_key"].startswith("as-")
    session_client = openai.OpenAI(base_url=url, api_key=started["api_key"], max_retries=0)  # AReaL: no /v1
    first = session_client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "1+1?"}], max_tokens=4
    )
    second = session_client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "2+2?"}], max_tokens=4
    )
    auth = {"Authorization": f"Bearer {started['api_key']}"}
    last = httpx.post(f"{url}/rl/set_reward", json={"reward": 1.0}, headers=auth).json()
    assert last["interaction_id"] == second.id
    by_id = httpx.post(f"{url}/rl/set_reward", json={"reward": 0.5, "interaction_id": first.id}, headers=auth)
    assert by_id.status_code == 200
    ended = httpx.post(f"{url}/rl/end_session", json={}, headers=auth)
    assert ended.json()["steps"] == 2
    trajectory = Trajectory.objects.get(session_id=started["session_id"])
    assert trajectory.status == "complete"
    assert trajectory.task_id == "math-1"
    assert trajectory.group_id == "math-1#0"
    assert {
        (str(reward.step_id), reward.value) for reward in Reward.objects.filter(trajectory=trajectory)
    } == {(second.id, 1.0), (first.id, 0.5)}
    after = httpx.post(
        f"{url}/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]},
        headers=auth,
    )
    assert after.status_code == 410
    assert after.json()["error"]["code"] == "session_ended"
    second_member = httpx.post(
        f"{url}/rl/start_session",
        json={"task_id": "math-1", "group_size": 2},
        headers={"Authorization": f"Bearer {key}"},
    ).json()
    third_member = httpx.post(
        f"{url}/rl/start_session",
        json={"task_id": "math-1", "group_size": 2},
        headers={"Authorization": f"Bearer {key}"},
    ).json()
    assert second_member["group_id"] == "math-1#0"
    assert third_member["group_id"] == "math-1#1"


def test_start_session_with_the_callers_own_group(gateway, backend, agent_key, tenant):
    url, gw = gateway
    headers = {"Authorization": f"Bearer {agent_key('inference')}"}
    groups = []
    for task_id in ("case-1", "case-2"):
        started = httpx.post(
            f"{url}/rl/start_session", json={"task_id": task_id, "group_id": "bfcl/simple"}, headers=headers
        ).json()
        assert started["group_id"] == "bfcl/simple"
        session = openai.OpenAI(base_url=f"{url}/v1", api_key=started["api_key"], max_retries=0)
        session.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": task_id}], max_tokens=3
        )
        httpx.post(
            f"{url}/rl/end_session", json={}, headers={"Authorization": f"Bearer {started['api_key']}"}
        )
        groups.append(Trajectory.objects.get(session_id=started["session_id"]).group_id)
    assert groups == ["bfcl/simple", "bfcl/simple"]  # two tasks, one group: one GRPO baseline
    before = Trajectory.objects.filter(tenant=tenant).count()
    for body in (
        {"task_id": "case-3", "group_id": "g", "group_size": 2},
        {"task_id": "case-3", "group_id": 7},
        {"task_id": "case-3", "group_id": "x" * 201},
    ):
        refused = httpx.post(f"{url}/rl/start_session", json=body, headers=headers)
        assert refused.status_code == 422, body
        assert refused.json()["error"]["param"] == "group_id"
    assert Trajectory.objects.filter(tenant=tenant).count() == before  # a refused start opens nothing


def test_v1_rewards_idempotency_and_targets(gateway, backend, agent_key, tenant, other_tenant):
    url, gw = gateway
    key = agent_key("inference", "rewards:write")
    reply = openai.OpenAI(
        base_url=f"{url}/v1", api_key=key, max_retries=0, default_headers={"X-Session-Id": "feedback"}
    ).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "q"}], max_tokens=3)
    headers = {"Authorization": f"Bearer {key}"}
    body = {"interaction_id": reply.id, "value": 1, "source": "user", "idempotency_key": "thumb-1"}
    first = httpx.post(f"{url}/v1/rewards", json=body, headers=headers)
    again = httpx.post(f"{url}/v1/rewards", json=body, headers=headers)
    assert first.status_code == 201
    assert again.status_code == 200
    assert first.json()["reward_id"] == again.json()["reward_id"]
    session = httpx.post(
        f"{url}/v1/rewards", json={"session_id": "feedback", "value": 0.2, "kind": "numeric"}, headers=headers
    )
    assert session.status_code == 201
    assert session.json()["target"] == "trajectory"
    assert Reward.objects.filter(tenant=tenant).count() == 2
    for bad, status in [
        ({"session_id": "nope", "value": 1}, 404),
        ({"step_id": "not-a-uuid", "value": 1}, 404),
        ({"value": 1}, 422),
        ({"session_id": "feedback", "value": "high"}, 422),
        ({"session_id": "feedback", "step_id": reply.id, "value": 1}, 422),
    ]:
        response = httpx.post(f"{url}/v1/rewards", json=bad, headers=headers)
        assert response.status_code == status, (bad, response.text)
        assert "error" in response.json()
    other_key = agent_key("inference", "rewards:write", of=other_tenant)
    foreign = httpx.post(
        f"{url}/v1/rewards",
        json={"interaction_id": reply.id, "value": 1},
        headers={"Authorization": f"Bearer {other_key}"},
    )
    assert foreign.status_code == 404
    no_scope = httpx.post(
        f"{url}/v1/rewards",
        json={"interaction_id": reply.id, "value": 1},
        headers={"Authorization": f"Bearer {agent_key('inference')}"},
    )
    assert no_scope.status_code == 403
    assert Reward.objects.filter(tenant=tenant).count() == 2
    assert Step.objects.filter(tenant=tenant).count() == 1
