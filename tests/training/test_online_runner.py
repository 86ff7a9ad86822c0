"""An online run's runner in this process (no worker): steps over the qualified queue, a version registered per
publication, and queued trajectories a publication aged past η dropped as stale."""

import pytest

from apps.audit.services import Actor
from apps.loop import training_runs as runners
from apps.training.models import ModelVersion, OnlineConsumption, OnlineRun, OnlineRunStatus
from apps.training.online import online_run_start, online_run_stop
from tests.training.helpers import base_version, qualified_trajectories

pytestmark = pytest.mark.django_db
SYSTEM = Actor.system("test")


def start(tenant, base, *, eta, max_steps=None):
    return online_run_start(
        tenant=tenant,
        actor=SYSTEM,
        base_version=base,
        hyperparameters={"learning_rate": 1e-3},
        samples_per_step=4,
        publish_every=1,
        staleness_bound=eta,
        max_steps=max_steps,
        publish_to_backends=False,
    )


def outcomes(run) -> dict[str, int]:
    rows = OnlineConsumption.objects.filter(run=run).values_list("outcome", flat=True)
    return {outcome: list(rows).count(outcome) for outcome in set(rows)}


def test_the_run_trains_a_step_per_batch_and_registers_each_version(
    tenant, default_model_dir, settings, tmp_path
):
    settings.AREAL_MODELS_DIR = tmp_path / "models"
    base = base_version(tenant, default_model_dir)
    run = start(tenant, base, eta=1, max_steps=2)
    qualified_trajectories(tenant)  # 12 one-sample trajectories sampled by version 0
    result = runners.online_run_execute(run_id=run.pk, poll_seconds=0)
    assert result == {"run": run.pk, "status": "stopped", "steps": 2, "version": 2}
    run = OnlineRun.objects.select_related("current_version").get(pk=run.pk)
    # step 1 trains 4 of the 12 and publishes v1; at step 2 the 8 left (lag 1 = η) are due: the publication
    # would age them past η, so they join that step (up to 2 batches' samples) instead of being dropped later
    assert (run.status, run.steps, run.consumed, run.dropped_stale) == (OnlineRunStatus.STOPPED, 2, 12, 0)
    assert outcomes(run) == {"trained": 12}
    versions = ModelVersion.objects.filter(tenant=tenant, name=base.name).order_by("number")
    assert [(version.number, version.parent_id) for version in versions] == [
        (0, None),
        (1, versions[0].pk),
        (2, versions[1].pk),
    ]
    assert run.current_version == versions[2]
    assert [version.metrics["online"]["step"] for version in versions[1:]] == [1, 2]


def test_a_publication_ages_the_waiting_trajectories_past_eta(
    tenant, default_model_dir, settings, tmp_path, monkeypatch
):
    settings.AREAL_MODELS_DIR = tmp_path / "models"
    base = base_version(tenant, default_model_dir)
    run = start(tenant, base, eta=0)
    qualified_trajectories(tenant)
    heartbeat = runners.online_run_heartbeat
    rounds = []

    def stops_in_the_third_round(*, run_id):
        rounds.append(run_id)
        if len(rounds) == 3:
            online_run_stop(tenant=tenant, actor=SYSTEM, run_id=run_id)
        return heartbeat(run_id=run_id)

    monkeypatch.setattr(runners, "online_run_heartbeat", stops_in_the_third_round)
    result = runners.online_run_execute(run_id=run.pk, poll_seconds=0)
    # round 1: with η = 0 every trajectory at version 0 is due (the publication ages it past η), so the step
    # takes as many as fit in 2 batches (8 of the 12) and publishes version 1; the 4 still waiting are stale in
    # round 2 and dropped without a step; round 3 sees the stop
    assert result == {"run": run.pk, "status": "stopped", "steps": 1, "version": 1}
    run = OnlineRun.objects.get(pk=run.pk)
    assert (run.steps, run.consumed, run.dropped_stale) == (1, 8, 4)
    assert outcomes(run) == {"trained": 8, "stale": 4}
    assert set(OnlineConsumption.objects.filter(run=run, outcome="stale").values_list("step", flat=True)) == {
        1
    }


def test_samples_of_unknown_version_are_counted_and_kept_by_default(
    tenant, default_model_dir, settings, tmp_path, caplog
):
    """Tokens recorded as version -1 (a backend that reported none, no version derived) cannot be aged: the
    run trains them, as before, but counts them on the run and says so in the log."""
    settings.AREAL_MODELS_DIR = tmp_path / "models"
    base = base_version(tenant, default_model_dir)
    run = start(tenant, base, eta=0, max_steps=1)
    qualified_trajectories(tenant, groups=1, version=-1)  # 4 trajectories, every generated token -1
    with caplog.at_level("WARNING", logger="apps.loop.training_runs"):
        result = runners.online_run_execute(run_id=run.pk, poll_seconds=0)
    assert result["steps"] == 1
    run = OnlineRun.objects.get(pk=run.pk)
    assert (run.consumed, run.dropped_stale, run.unknown_version_samples) == (4, 0, 4)
    assert outcomes(run) == {"trained": 4}
    assert any(
        "4 sample(s) hold generated tokens of unknown policy version" in line for line in caplog.messages
    )


def test_samples_of_unknown_version_are_dropped_when_the_installation_says_so(
    tenant, default_model_dir, settings, tmp_path, monkeypatch
):
    settings.AREAL_MODELS_DIR = tmp_path / "models"
    settings.AREAL_TRAINING_UNKNOWN_VERSIONS = "drop"
    base = base_version(tenant, default_model_dir)
    run = start(tenant, base, eta=1)
    unknown = qualified_trajectories(tenant, groups=1, version=-1)
    heartbeat = runners.online_run_heartbeat
    rounds = []

    def stops_in_the_second_round(*, run_id):
        rounds.append(run_id)
        if len(rounds) == 2:
            online_run_stop(tenant=tenant, actor=SYSTEM, run_id=run_id)
        return heartbeat(run_id=run_id)

    monkeypatch.setattr(runners, "online_run_heartbeat", stops_in_the_second_round)
    result = runners.online_run_execute(run_id=run.pk, poll_seconds=0)
    assert result["steps"] == 0
    run = OnlineRun.objects.get(pk=run.pk)
    assert (run.consumed, run.unknown_version_samples) == (0, len(unknown))
    assert outcomes(run) == {"empty": len(unknown)}


def test_whole_groups_train_settled_groups_only_and_consume_alike_ones_untrained(
    tenant, default_model_dir, settings, tmp_path
):
    from apps.trajectories.models import Trajectory, TrajectoryStatus
    from tests.trajectories.factories import TrajectoryFactory

    settings.AREAL_MODELS_DIR = tmp_path / "models"
    base = base_version(tenant, default_model_dir)
    run = online_run_start(
        tenant=tenant,
        actor=SYSTEM,
        base_version=base,
        hyperparameters={"learning_rate": 1e-3, "whole_groups": True, "skip_uniform_groups": True},
        samples_per_step=4,
        publish_every=1,
        staleness_bound=8,
        max_steps=1,
        publish_to_backends=False,
    )
    qualified_trajectories(tenant, groups=3)  # task-0#0 .. task-2#0, four answers each, rewards apart
    qualified_trajectories(tenant, groups=1, task="alike", reward=1.0)  # alike-0#0: four right answers
    # a fifth answer of task-0#0 is still open: that group is not settled
    TrajectoryFactory(tenant=tenant, session_id="rl-open", group_id="task-0#0", status=TrajectoryStatus.OPEN)
    result = runners.online_run_execute(run_id=run.pk, poll_seconds=0)
    assert result["steps"] == 1
    group_of = dict(Trajectory.objects.filter(tenant=tenant).values_list("id", "group_id"))
    groups: dict[str, set[str]] = {}
    for row in OnlineConsumption.objects.filter(run=run):
        groups.setdefault(row.outcome, set()).add(group_of[row.trajectory_id])
    # the step took task-1#0 whole (the oldest settled group), the alike group went untrained, task-0#0 (open)
    # and task-2#0 (not needed) wait
    assert groups == {"trained": {"task-1#0"}, "uniform": {"alike-0#0"}, "waiting": {"task-0#0", "task-2#0"}}
    assert outcomes(run) == {"trained": 4, "uniform": 4, "waiting": 8}
    assert OnlineRun.objects.get(pk=run.pk).consumed == 4
