"""AReaL's clients, unchanged in what they send: the older form with the session id in the path (or the body)
and the tenant key, `end_session {session_id, final_reward}`, set_reward retried and changed, and the
per-interaction rewards reaching training samples one per step."""

import uuid

import httpx
import openai
import pytest

from apps.audit.models import AuditEvent
from apps.core.shared_state import shared_set_many
from apps.gateway.sessions import SessionState, _cursor_key
from apps.rewards.models import Reward
from apps.rewards.selectors import training_reward
from apps.training.selectors import training_records
from apps.trajectories.models import Step, Trajectory
from tests.gateway.conftest import MODEL
from tests.gateway.helpers import drain
from workers.rl.samples import build_samples

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("pii_off")]


def _bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def _start(url: str, key: str, **body) -> dict:
    started = httpx.post(f"{url}/rl/start_session", json=body, headers=_bearer(key))
    assert started.status_code == 200, started.text
    return started.json()


def _ask(base_url: str, key: str, text: str):
    client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    return client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": text}], max_tokens=4
    )


def test_the_older_client_form_with_the_session_id_in_the_path(gateway, backend, agent_key, tenant):
    url, gw = gateway
    key = agent_key("inference")
    started = _start(url, key, task_id="math-7")
    session_id = started["session_id"]
    # AReaL's oldest ProxySession: OPENAI_BASE_URL=<proxy>/v1/<session_id>; the key is the tenant's
    first = _ask(f"{url}/v1/{session_id}", key, "1+1?")
    second = _ask(f"{url}/v1/{session_id}", key, "2+2?")
    drain(gw)
    trajectory = Trajectory.objects.get(tenant=tenant, session_id=session_id)
    assert set(Step.objects.filter(trajectory=trajectory).values_list("id", flat=True)) == {
        uuid.UUID(first.id),
        uuid.UUID(second.id),
    }

    rewarded = httpx.post(
        f"{url}/v1/{session_id}/rl/set_reward",
        json={"reward": 0.5, "interaction_id": first.id},
        headers=_bearer(key),
    )
    assert rewarded.status_code == 200, rewarded.text
    assert rewarded.json()["interaction_id"] == first.id
    # the oldest client names the session and the completion in the body
    by_body = httpx.post(
        f"{url}/v1/rl/set_reward",
        json={"session_id": session_id, "completion_id": first.id, "reward": 0.5},
        headers=_bearer(key),
    )
    assert by_body.status_code == 200, by_body.text
    assert by_body.json()["reward_id"] == rewarded.json()["reward_id"]  # the same reward: nothing added
    # the middle form: the session id right after a base URL of <gateway>/s
    via_s = httpx.post(f"{url}/s/{session_id}/rl/set_reward", json={"reward": 0.5}, headers=_bearer(key))
    assert via_s.status_code == 200, via_s.text
    assert via_s.json()["interaction_id"] == second.id

    ended = httpx.post(
        f"{url}/v1/rl/end_session",
        json={"session_id": session_id, "final_reward": 1.0},
        headers=_bearer(key),
    )
    assert ended.status_code == 200, ended.text
    assert ended.json()["steps"] == 2
    assert ended.json()["interaction_count"] == 2
    assert ended.json()["final_reward"]["step_id"] == second.id
    trajectory.refresh_from_db()
    assert trajectory.status == "complete"
    current = {
        (str(reward.step_id), reward.value, reward.timing)
        for reward in Reward.objects.filter(trajectory=trajectory)
    }
    # the final reward replaced the 0.5 set on the last completion; that one stays stored
    assert current == {
        (first.id, 0.5, "immediate"),
        (second.id, 0.5, "immediate"),
        (second.id, 1.0, "terminal"),
    }
    # the session key of the session ends with it, though the tenant key ended it
    late = httpx.post(
        f"{url}/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 2},
        headers=_bearer(started["api_key"]),
    )
    assert late.status_code == 410
    again = httpx.post(f"{url}/v1/{session_id}/rl/end_session", headers=_bearer(key))
    assert again.status_code == 410
    after = httpx.post(f"{url}/v1/{session_id}/rl/set_reward", json={"reward": 1}, headers=_bearer(key))
    assert after.status_code == 410


def test_set_reward_retried_stores_one_reward_and_a_new_value_replaces_it(
    gateway, backend, agent_key, tenant
):
    url, _ = gateway
    started = _start(url, agent_key("inference"), task_id="retry")
    session_key = started["api_key"]
    answer = _ask(url, session_key, "hello")
    body = {"reward": 0.25, "interaction_id": answer.id}
    first = httpx.post(f"{url}/rl/set_reward", json=body, headers=_bearer(session_key)).json()
    retried = [
        httpx.post(f"{url}/rl/set_reward", json=body, headers=_bearer(session_key)).json() for _ in range(3)
    ]
    assert first["created"] is True
    assert {reply["reward_id"] for reply in retried} == {first["reward_id"]}
    assert {reply["created"] for reply in retried} == {False}
    assert Reward.objects.filter(tenant=tenant).count() == 1

    changed = httpx.post(
        f"{url}/rl/set_reward",
        json={"reward": 0.75, "interaction_id": answer.id},
        headers=_bearer(session_key),
    ).json()
    assert changed["created"] is True
    assert changed["replaces"] == first["reward_id"]
    replacement = Reward.objects.get(pk=changed["reward_id"])
    assert replacement.reason == f"replaces reward {first['reward_id']} (value 0.25)"
    assert replacement.source == "agent"
    event = AuditEvent.objects.get(tenant=tenant, verb="reward.replace")
    assert (event.target_id, event.data["replaces"], event.data["replaced_value"]) == (
        changed["reward_id"],
        first["reward_id"],
        0.25,
    )
    # back to the first value is a change too; the same value again is a retry
    back = httpx.post(f"{url}/rl/set_reward", json=body, headers=_bearer(session_key)).json()
    assert (back["created"], back["replaces"]) == (True, changed["reward_id"])
    assert (
        httpx.post(f"{url}/rl/set_reward", json=body, headers=_bearer(session_key)).json()["created"] is False
    )
    assert Reward.objects.filter(tenant=tenant).count() == 3
    trajectory = Trajectory.objects.get(tenant=tenant, session_id=started["session_id"])
    # the replaced rewards no longer count: the agent's reward for the interaction is its latest
    assert training_reward(tenant=tenant, trajectory=trajectory) == 0.25


def test_final_reward_is_recorded_in_the_same_call_and_a_bad_one_ends_nothing(
    gateway, backend, agent_key, tenant
):
    url, _ = gateway
    started = _start(url, agent_key("inference"))
    session_key = started["api_key"]
    answer = _ask(url, session_key, "hi")
    trajectory = Trajectory.objects.get(tenant=tenant, session_id=started["session_id"])
    for raw in (
        b'{"final_reward": "high"}',
        b'{"final_reward": NaN}',
        b'{"final_reward": Infinity}',
        b'{"final_reward": [1]}',
    ):
        refused = httpx.post(
            f"{url}/rl/end_session",
            content=raw,
            headers={**_bearer(session_key), "content-type": "application/json"},
        )
        assert refused.status_code == 422, (raw, refused.text)
        assert refused.json()["error"]["param"] == "final_reward"
    trajectory.refresh_from_db()
    assert trajectory.status == "open"
    assert not Reward.objects.filter(tenant=tenant).exists()
    assert _ask(url, session_key, "still open?").id  # the session goes on

    ended = httpx.post(f"{url}/rl/end_session", json={"final_reward": 1}, headers=_bearer(session_key))
    assert ended.status_code == 200, ended.text
    reward = Reward.objects.get(tenant=tenant)
    last = Step.objects.filter(trajectory=trajectory).order_by("-index").first()
    assert (reward.step_id, reward.value, reward.source, reward.target) == (last.pk, 1.0, "agent", "step")
    assert str(last.pk) != answer.id

    # a session without a completion: the final reward goes to the trajectory
    empty = _start(url, agent_key("inference"))
    ended = httpx.post(f"{url}/rl/end_session", json={"final_reward": 0.5}, headers=_bearer(empty["api_key"]))
    assert ended.status_code == 200, ended.text
    assert ended.json()["final_reward"]["target"] == "trajectory"
    bare = Trajectory.objects.get(tenant=tenant, session_id=empty["session_id"])
    assert (bare.status, training_reward(tenant=tenant, trajectory=bare)) == ("complete", 0.5)


def test_names_that_do_not_fit_the_key_are_refused(gateway, backend, agent_key, tenant):
    url, _ = gateway
    key = agent_key("inference")
    mine, other = _start(url, key), _start(url, key)
    answer = _ask(f"{url}/v1/{other['session_id']}", key, "q")
    # a session key naming another session than its own
    mismatch = httpx.post(
        f"{url}/rl/end_session", json={"session_id": other["session_id"]}, headers=_bearer(mine["api_key"])
    )
    assert (mismatch.status_code, mismatch.json()["error"]["code"]) == (409, "session_mismatch")
    # an interaction of another session
    foreign_step = httpx.post(
        f"{url}/rl/set_reward",
        json={"reward": 1, "interaction_id": answer.id},
        headers=_bearer(mine["api_key"]),
    )
    assert (foreign_step.status_code, foreign_step.json()["error"]["code"]) == (404, "interaction_not_found")
    # the tenant key without any session named
    unnamed = httpx.post(f"{url}/rl/set_reward", json={"reward": 1}, headers=_bearer(key))
    assert (unnamed.status_code, unnamed.json()["error"]["code"]) == (400, "session_key_required")
    # AReaL's oldest client sends the session id as its key
    as_key = httpx.post(
        f"{url}/v1/{other['session_id']}/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]},
        headers=_bearer(other["session_id"]),
    )
    assert (as_key.status_code, as_key.json()["error"]["code"]) == (401, "session_id_not_a_key")
    assert not Reward.objects.filter(tenant=tenant).exists()
    assert set(Trajectory.objects.filter(tenant=tenant).values_list("status", flat=True)) == {"open"}


def test_per_interaction_rewards_reach_training_samples_per_step(gateway, backend, agent_key, tenant):
    url, _ = gateway
    key = agent_key("inference")
    started = _start(url, key, task_id="steps")
    session_key = started["api_key"]
    client = openai.OpenAI(base_url=url, api_key=session_key, max_retries=0)
    question = [{"role": "user", "content": "Say a word."}]
    first = client.chat.completions.create(model=MODEL, messages=question, max_tokens=4)
    follow_up = question + [
        {"role": "assistant", "content": first.choices[0].message.content or ""},
        {"role": "user", "content": "Another."},
    ]
    second = client.chat.completions.create(model=MODEL, messages=follow_up, max_tokens=4)
    assert (
        httpx.post(
            f"{url}/rl/set_reward",
            json={"reward": 0.25, "interaction_id": first.id},
            headers=_bearer(session_key),
        ).status_code
        == 200
    )
    assert (
        httpx.post(
            f"{url}/rl/end_session", json={"final_reward": 1.0}, headers=_bearer(session_key)
        ).status_code
        == 200
    )
    trajectory = Trajectory.objects.get(tenant=tenant, session_id=started["session_id"])

    [record] = training_records(tenant=tenant, trajectory_ids=[trajectory.pk])
    samples = build_samples([record]).samples
    by_step = {step_id: sample.reward for sample in samples for step_id in sample.step_ids}
    assert by_step == {first.id: 0.25, second.id: 1.0}
    assert len({sample.unit for sample in samples}) == len(samples) == 2

    # one reward only: every step trains with it, as before rewards were kept per step
    single = _start(url, key, task_id="steps")
    one = _ask(url, single["api_key"], "a")
    two = _ask(url, single["api_key"], "b")
    httpx.post(f"{url}/rl/end_session", json={"final_reward": 0.5}, headers=_bearer(single["api_key"]))
    only = Trajectory.objects.get(tenant=tenant, session_id=single["session_id"])
    [record] = training_records(tenant=tenant, trajectory_ids=[only.pk])
    samples = build_samples([record]).samples
    assert {step_id: sample.reward for sample in samples for step_id in sample.step_ids} == {
        one.id: 0.5,
        two.id: 0.5,
    }
    assert {sample.unit for sample in samples} == {str(only.pk)}


def test_a_last_completion_not_yet_stored_is_waited_for_then_answered_503(
    gateway, backend, agent_key, tenant, settings
):
    """The session's shared cursor names a step no process has stored (as when the process that served it
    has not flushed its journal): set_reward and end_session's final_reward without an interaction id wait
    AREAL_GATEWAY_REWARD_STEP_WAIT_MS for it, then answer 503 with Retry-After, storing and ending nothing."""
    settings.AREAL_GATEWAY_REWARD_STEP_WAIT_MS = 300
    url, _ = gateway
    started = _start(url, agent_key("inference"))
    session_key = started["api_key"]
    answer = _ask(url, session_key, "hi")
    elsewhere = SessionState(
        session_id=started["session_id"], last_step_id=str(uuid.uuid4()), last_parent_id=answer.id
    )
    shared_set_many({_cursor_key(tenant.pk, started["session_id"]): elsewhere.cursor()}, ttl_seconds=60)

    for path, body in (("/rl/set_reward", {"reward": 1}), ("/rl/end_session", {"final_reward": 1})):
        refused = httpx.post(f"{url}{path}", json=body, headers=_bearer(session_key))
        assert refused.status_code == 503, (path, refused.text)
        assert refused.json()["error"]["code"] == "completion_not_recorded"
        assert refused.headers["retry-after"] == "1"
    assert not Reward.objects.filter(tenant=tenant).exists()
    assert Trajectory.objects.get(tenant=tenant, session_id=started["session_id"]).status == "open"
    # naming the interaction needs no wait
    named = httpx.post(
        f"{url}/rl/set_reward", json={"reward": 1, "interaction_id": answer.id}, headers=_bearer(session_key)
    )
    assert named.status_code == 200, named.text
    assert Reward.objects.get(tenant=tenant).step_id == uuid.UUID(answer.id)
