"""Session attribution holds across web processes: two real web processes (uvicorn, on the test database and
the shared session state) behind one agent. A conversation whose next turn lands on the other process
continues its session, a retry landing there is recorded as a retry of the first attempt, and another key's
or another tenant's identical messages start sessions of their own. A reward for "the last completion" of a
session rewards the one another process served, once that process has stored it."""

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from apps.audit.services import Actor
from apps.inference.models import BackendKind
from apps.rewards.models import Reward
from apps.tenants.services import api_key_create
from apps.trajectories.models import Step
from bench.gateway.upstream import running_upstream
from tests.inference.factories import BackendFactory
from tests.servers import free_port, web_server_process

MODEL = "bench-model"
TURN = [{"role": "user", "content": "Plan the trip"}]

pytestmark = pytest.mark.django_db(transaction=True)


def _key(tenant, name: str = "agent") -> str:
    return api_key_create(tenant=tenant, actor=Actor.system("test"), name=name, scopes=["inference"])[1]


def _chat(url: str, key: str, messages: list[dict], session_id: str | None = None) -> tuple[str, str, str]:
    """(step id, session id the gateway answered with, reply text)."""
    client = openai.OpenAI(
        base_url=f"{url}/v1",
        api_key=key,
        max_retries=0,
        default_headers={"X-Session-Id": session_id} if session_id else None,
    )
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=messages, max_tokens=8)
    reply = raw.parse()
    return reply.id, raw.headers["x-session-id"], reply.choices[0].message.content


def _recorded(*step_ids: str) -> list[Step]:
    """The steps, once each process's journal flusher has written them."""
    deadline = time.monotonic() + 20
    while True:
        steps = {
            str(step.pk): step for step in Step.objects.filter(pk__in=step_ids).select_related("trajectory")
        }
        if len(steps) == len(step_ids) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert set(steps) == set(step_ids), "steps not recorded"
    return [steps[step_id] for step_id in step_ids]


def test_sessions_and_retries_are_attributed_across_web_processes(tenant, other_tenant, tmp_path):
    key, second_key, other_tenant_key = _key(tenant), _key(tenant, "agent-2"), _key(other_tenant)
    log = tmp_path / "web.log"
    with (
        running_upstream(free_port()) as (upstream_url, _),
        web_server_process(log_path=log) as (_, first),
        web_server_process(log_path=log) as (_, second),
    ):
        for owner in (tenant, other_tenant):
            BackendFactory(
                tenant=owner,
                name="upstream",
                base_url=upstream_url,
                kind=BackendKind.OPENAI_COMPATIBLE,
                served_model=MODEL,
            )
        # (a) turn 1 on the first process, turn 2 (its messages plus the reply) on the second
        turn_one, session_id, reply = _chat(first, key, TURN)
        assert session_id.startswith("auto-")
        turn_two_messages = [
            *TURN,
            {"role": "assistant", "content": reply},
            {"role": "user", "content": "Go on"},
        ]
        turn_two, continued, _ = _chat(second, key, turn_two_messages)
        assert continued == session_id

        # (b) the same turn 2 again, on the first process: a retry of the second process's attempt
        retry, retried_in, _ = _chat(first, key, turn_two_messages)
        assert retried_in == session_id
        # and by header: a call repeated on the other process
        by_header, _, _ = _chat(first, key, TURN, session_id="task-7")
        by_header_again, _, _ = _chat(second, key, TURN, session_id="task-7")

        # (c) the same messages under another key of the tenant, or another tenant's key: sessions of their own
        _, second_keys_session, _ = _chat(second, second_key, turn_two_messages)
        _, other_tenants_session, _ = _chat(second, other_tenant_key, turn_two_messages)
        assert len({session_id, second_keys_session, other_tenants_session}) == 3
        other_tenants_header_call, _, _ = _chat(second, other_tenant_key, TURN, session_id="task-7")

        one, two, three, header_one, header_two, others = _recorded(
            turn_one, turn_two, retry, by_header, by_header_again, other_tenants_header_call
        )

    assert one.trajectory_id == two.trajectory_id == three.trajectory_id
    assert one.trajectory.session_id == session_id
    assert (one.index, two.index) == (0, 1)
    assert str(two.parent_step_id) == turn_one
    assert two.retry_of is None
    assert str(three.retry_of) == turn_two  # recorded as a retry of the first attempt, made elsewhere
    assert str(three.parent_step_id) == turn_one
    assert one.trajectory.step_count == 3

    assert header_one.trajectory_id == header_two.trajectory_id
    assert str(header_two.retry_of) == by_header

    assert others.trajectory.tenant_id == other_tenant.pk
    assert others.trajectory.session_id == "task-7"
    assert others.trajectory_id != header_one.trajectory_id
    assert others.retry_of is None  # nothing of the first tenant's session of the same id
    assert others.parent_step_id is None
    for session in (second_keys_session, other_tenants_session):
        (step,) = Step.objects.filter(trajectory__session_id=session)
        assert step.parent_step_id is None
        assert step.retry_of is None
    assert (
        Step.objects.get(trajectory__session_id=other_tenants_session).trajectory.tenant_id == other_tenant.pk
    )


def test_set_reward_without_an_interaction_id_rewards_the_last_completion_another_process_served(
    tenant, tmp_path
):
    """Turn 1 on the first process, turn 2 on the second; set_reward with no interaction id, sent to the
    first, rewards turn 2 (the session's shared cursor), not turn 1 (the first process's own memory). The
    second process stores its steps only when it stops, so the reward waits for turn 2 to be stored."""
    key = _key(tenant)
    log = tmp_path / "web.log"
    with (
        running_upstream(free_port()) as (upstream_url, _),
        web_server_process(log_path=log, extra_env={"AREAL_GATEWAY_REWARD_STEP_WAIT_MS": "60000"}) as (
            _,
            first,
        ),
        web_server_process(log_path=log, extra_env={"AREAL_JOURNAL_FLUSH_MS": "600000"}) as (
            second_process,
            second,
        ),
    ):
        BackendFactory(
            tenant=tenant,
            name="upstream",
            base_url=upstream_url,
            kind=BackendKind.OPENAI_COMPATIBLE,
            served_model=MODEL,
        )
        started = httpx.post(
            f"{first}/rl/start_session", json={"task_id": "trip"}, headers={"Authorization": f"Bearer {key}"}
        )
        assert started.status_code == 200, started.text
        session_key = started.json()["api_key"]
        turn_one, _, reply = _chat(first, session_key, TURN)
        turn_two, _, _ = _chat(
            second,
            session_key,
            [*TURN, {"role": "assistant", "content": reply}, {"role": "user", "content": "Go on"}],
        )
        _recorded(turn_one)
        assert not Step.objects.filter(pk=turn_two).exists()  # held in the second process's journal

        with ThreadPoolExecutor(max_workers=1) as pool:
            answer = pool.submit(
                httpx.post,
                f"{first}/rl/set_reward",
                json={"reward": 1.0},
                headers={"Authorization": f"Bearer {session_key}"},
                timeout=90,
            )
            time.sleep(1.5)
            assert not answer.done(), answer.result().text  # waiting for turn 2 to be stored
            assert not Reward.objects.filter(tenant=tenant).exists()
            second_process.terminate()  # stopping, the second process stores what its journal holds
            second_process.wait(timeout=60)
            rewarded = answer.result(timeout=90)

        assert rewarded.status_code == 200, rewarded.text
        assert rewarded.json()["interaction_id"] == turn_two

    (reward,) = Reward.objects.filter(tenant=tenant)
    assert (str(reward.step_id), reward.value) == (turn_two, 1.0)
    assert reward.trajectory.session_id == started.json()["session_id"]
