"""The BFCL agent against the real gateway and the embedded inference server: each case is one recorded
trajectory (a multi-turn case one session across its turns), and the checker's verdict arrives as the
environment's reward, per trajectory or per step. The tiny model mostly answers wrong: what is asserted is
the behaviour, not accuracy."""

import json
import shutil
import time

import pytest

from apps.inference.models import BackendKind, BackendState
from apps.rewards.models import Reward
from apps.trajectories.models import Step, Trajectory
from tests.gateway.conftest import MODEL, agent_key, gateway  # noqa: F401  (fixtures)
from tests.gateway.helpers import drain
from tests.inference.factories import BackendFactory
from tests.servers import inference_server
from tests.workers.inference.conftest import default_model_dir  # noqa: F401  (fixture)
from workers.envs.bfcl import BfclAgent, load_cases, score_run
from workers.envs.bfcl.traffic import BfclTraffic

pytestmark = pytest.mark.django_db(transaction=True)

# Train-split cases; multi_turn_base_105 has two turns and the shortest prompt of its category (one API
# class, about 3 800 tokens with the default tokenizer).
CASE_IDS = ("simple_python_0", "irrelevance_1", "multi_turn_base_105")
POSITIONS = 8192


@pytest.fixture(scope="module")
def long_context_model_dir(default_model_dir, tmp_path_factory):  # noqa: F811
    """The default model with room for a multi-turn case's tools (its rotary positions extend as they are)."""
    out = tmp_path_factory.mktemp("models") / "default-long"
    shutil.copytree(default_model_dir, out)
    config = json.loads((out / "config.json").read_text())
    config["max_position_embeddings"] = POSITIONS
    (out / "config.json").write_text(json.dumps(config))
    return out


@pytest.fixture(scope="module")
def long_context_backend_url(long_context_model_dir, tmp_path_factory):
    with inference_server(
        long_context_model_dir, log_path=tmp_path_factory.mktemp("logs") / "bfcl-inference.log"
    ) as url:
        yield url


@pytest.fixture
def backend(tenant, long_context_backend_url):
    return BackendFactory(
        tenant=tenant,
        name="embedded-long",
        base_url=long_context_backend_url,
        kind=BackendKind.EMBEDDED,
        served_model=MODEL,
        model_version="1",
        state=BackendState.UP,
    )


def _case(case_id):
    return next(case for case in load_cases(case_id.rsplit("_", 1)[0]) if case.case_id == case_id)


def test_the_agent_runs_bfcl_cases_through_the_gateway_and_rewards_them_with_the_checkers_verdict(
    gateway,  # noqa: F811
    backend,
    agent_key,  # noqa: F811
    tenant,
):
    url, application = gateway
    cases = [_case(case_id) for case_id in CASE_IDS]
    assert {case.split for case in cases} == {"train"}
    with BfclAgent(
        base_url=url,
        api_key=agent_key("inference", "rewards:write"),
        model=MODEL,
        max_tokens=16,
        max_steps_per_turn=2,
    ) as agent:
        results = agent.run_cases(cases)
    drain(application)

    for result in results:
        run, verdict = result.run, result.score
        assert run.error is None, run.error
        assert result.problems == ()
        assert result.ended
        assert verdict == score_run(run)  # the reward's value is the checker's verdict on what was recorded
        assert verdict.reason
        # one trajectory per case, holding every completion of it, in order
        trajectory = Trajectory.objects.get(tenant=tenant, session_id=run.session_id)
        assert trajectory.task_id == run.case.case_id
        assert trajectory.status == "complete"
        steps = list(Step.objects.filter(trajectory=trajectory).order_by("index"))
        assert [str(step.id) for step in steps] == [step.completion_id for step in run.steps]
        rewards = list(Reward.objects.filter(trajectory=trajectory))
        assert {reward.source for reward in rewards} == {"environment"}
        assert all(posted.status == 201 for posted in result.rewards)
        if run.case.multi_turn:
            assert len(run.steps) >= 2  # two turns, or one turn's calls and their follow-up: one session
            assert len(verdict.turns) == len(run.case.turns)
            assert sorted((str(reward.step_id), reward.value) for reward in rewards) == sorted(
                (step.completion_id, 1.0 if verdict.turns[step.turn] else 0.0) for step in run.steps
            )
        else:
            assert len(run.steps) == 1
            assert [(reward.step_id, reward.value) for reward in rewards] == [(None, verdict.value)]

    assert Trajectory.objects.filter(tenant=tenant).count() == len(CASE_IDS)


def _irrelevance_traffic(gateway, api_key: str, *, episodes: int, **options) -> BfclTraffic:
    """One simulated user on the irrelevance category's train cases, run until `episodes` were answered (or
    two minutes passed), stopped, and the gateway's journal drained into the database."""
    url, application = gateway
    traffic = BfclTraffic(
        gateway_url=url,
        api_key=api_key,
        model=MODEL,
        categories=("irrelevance",),
        users=1,
        max_tokens=16,
        **options,
    ).start()
    deadline = time.monotonic() + 120
    try:
        while traffic.stats.episodes < episodes and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        traffic.stop()
    drain(application)
    return traffic


def test_the_demos_bfcl_users_open_rl_sessions_grouped_by_category_and_reward_them(
    gateway,  # noqa: F811
    backend,
    agent_key,  # noqa: F811
    tenant,
):
    """BfclTraffic, as `DEMO_TASK=bfcl` runs it: each case is an RL session whose group is its category, so the
    trainer's GRPO baseline is the category's mean reward, and the checker's verdict is its reward."""
    traffic = _irrelevance_traffic(gateway, agent_key("inference", "rewards:write"), episodes=2)

    assert traffic.stats.episodes >= 2, traffic.stats.last_problem
    assert traffic.stats.errors == 0, traffic.stats.last_problem
    assert traffic.stats.rejected_rewards == 0, traffic.stats.last_problem
    trajectories = list(Trajectory.objects.filter(tenant=tenant, status="complete"))
    assert len(trajectories) >= 2
    for trajectory in trajectories:
        assert trajectory.group_id == "bfcl/irrelevance"
        assert _case(trajectory.task_id).split == "train"
        assert {reward.source for reward in Reward.objects.filter(trajectory=trajectory)} == {"environment"}
    assert traffic.by_category["irrelevance"][0] == traffic.stats.episodes


def test_with_a_group_size_the_users_answer_one_case_several_times_in_one_group(
    gateway,  # noqa: F811
    backend,
    agent_key,  # noqa: F811
    tenant,
):
    """DEMO_BFCL_GROUP=k: a user starts k RL sessions for one case, then answers it in each at once, the k of
    them one GRPO group of their own (the baseline is the case's mean reward, not its category's)."""
    traffic = _irrelevance_traffic(gateway, agent_key("inference", "rewards:write"), episodes=4, group_size=2)

    assert traffic.stats.episodes >= 4, traffic.stats.last_problem
    assert traffic.stats.errors == 0, traffic.stats.last_problem
    groups: dict[str, list[Trajectory]] = {}
    for trajectory in Trajectory.objects.filter(tenant=tenant, status="complete"):
        groups.setdefault(trajectory.group_id, []).append(trajectory)
    complete = {group: members for group, members in groups.items() if len(members) == 2}
    assert len(complete) >= 2, sorted(groups)
    for group, members in complete.items():
        (task_id,) = {member.task_id for member in members}  # one case's answers
        assert group.startswith(f"bfcl/{task_id}/0-0-")
        assert _case(task_id).split == "train"
        assert len({member.session_id for member in members}) == 2  # a session each
        # every session of the group started before any of them ended: while an answer is undecided, the
        # group's other sessions are on record (a learner taking whole groups waits for them)
        assert max(member.started_at for member in members) < min(member.ended_at for member in members)
    assert all(len(members) <= 2 for members in groups.values())


def test_a_group_size_below_one_is_refused():
    with pytest.raises(ValueError, match="group_size"):
        BfclTraffic(
            gateway_url="http://127.0.0.1:1",
            api_key="k",
            model=MODEL,
            categories=("irrelevance",),
            group_size=0,
        )
