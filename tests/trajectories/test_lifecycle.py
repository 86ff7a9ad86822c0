"""How sessions end without the agent calling /rl/end_session, and what a late step does.

Idle close runs through the beat task's function with time moved by setting timestamps (never by sleeping);
late steps go through `steps_ingest`, the journal's group commit. A second tenant's rows stay as they were."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.qualification.models import Qualification
from apps.rewards.services import reward_append_for_agent
from apps.tenants.models import TenantPolicy
from apps.trajectories.lifecycle import trajectories_close_idle
from apps.trajectories.models import EndReason, Step, Trajectory, TrajectoryStatus, trajectory_id_for
from apps.trajectories.services import steps_ingest, trajectory_end, trajectory_open
from apps.trajectories.tasks import close_idle_trajectories
from tests.qualification.conftest import eager_tasks  # noqa: F401  (fixture)
from tests.rewards.factories import make_spec
from tests.trajectories.builders import gateway_step, ingested

pytestmark = pytest.mark.django_db


def _idle_timeout(tenant, seconds: int) -> None:
    TenantPolicy.objects.filter(tenant=tenant).update(session_idle_seconds=seconds)


def _age(trajectory: Trajectory, *, seconds: int) -> None:
    """Moves the trajectory's start and every step `seconds` into the past."""
    moment = timezone.now() - timedelta(seconds=seconds)
    Trajectory.objects.filter(pk=trajectory.pk).update(started_at=moment)
    Step.objects.filter(trajectory=trajectory).update(created_at=moment)


def _session(tenant, session_id: str, *, steps: int = 1, idle_for: int | None = None) -> Trajectory:
    trajectory = ingested(tenant, session_id, [gateway_step(tenant, session_id) for _ in range(steps)])
    if idle_for is not None:
        _age(trajectory, seconds=idle_for)
    return trajectory


def _fields(trajectory: Trajectory) -> tuple:
    trajectory.refresh_from_db()
    return (
        trajectory.status,
        trajectory.ended_at,
        trajectory.end_reason,
        trajectory.step_count,
        trajectory.prompt_tokens,
        trajectory.completion_tokens,
        trajectory.cost_usd,
        list(Step.objects.filter(trajectory=trajectory).order_by("index").values_list("id", "index")),
    )


# ---------------------------------------------------------------------------------------------- idle close


def test_the_beat_task_closes_idle_sessions_by_each_tenants_timeout(tenant, other_tenant):
    _idle_timeout(tenant, 600)
    _idle_timeout(other_tenant, 3600)
    idle = _session(tenant, "idle", idle_for=700)
    recent = _session(tenant, "recent", idle_for=30)
    started_long_ago = _session(tenant, "long-running", idle_for=5000)
    fresh_step = gateway_step(tenant, "long-running")
    steps_ingest(records=[fresh_step])  # its newest step is recent: still active
    theirs = _session(other_tenant, "idle", idle_for=700)  # idle by our 600 s, not by their 3600 s

    result = close_idle_trajectories()

    assert result == {"acme": {"closed": 1, "remaining": 0, "idle_seconds": 600}}
    idle.refresh_from_db()
    assert idle.status == TrajectoryStatus.COMPLETE
    assert idle.end_reason == EndReason.IDLE
    assert idle.ended_at is not None
    for still_open in (recent, started_long_ago, theirs):
        still_open.refresh_from_db()
        assert still_open.status == TrajectoryStatus.OPEN
        assert still_open.end_reason == ""
    event = AuditEvent.objects.get(tenant=tenant, verb="trajectory.idle_close")
    assert event.data["closed"] == 1
    assert not AuditEvent.objects.filter(tenant=other_tenant, verb="trajectory.idle_close").exists()

    before = _fields(idle)
    assert close_idle_trajectories() == {}  # idempotent: nothing more to close
    assert _fields(idle) == before
    assert AuditEvent.objects.filter(tenant=tenant, verb="trajectory.idle_close").count() == 1


def test_a_timeout_of_zero_never_closes_by_idleness(tenant):
    _idle_timeout(tenant, 0)
    ancient = _session(tenant, "ancient", idle_for=90 * 86400)

    assert close_idle_trajectories() == {}

    ancient.refresh_from_db()
    assert ancient.status == TrajectoryStatus.OPEN


def test_a_session_without_steps_is_idle_from_its_start(tenant):
    _idle_timeout(tenant, 600)
    started = trajectory_open(tenant=tenant, session_id="started-only")
    Trajectory.objects.filter(pk=started.pk).update(started_at=timezone.now() - timedelta(seconds=601))
    just_started = trajectory_open(tenant=tenant, session_id="just-started")

    assert trajectories_close_idle(tenant=tenant)["closed"] == 1

    started.refresh_from_db()
    just_started.refresh_from_db()
    assert (started.status, started.end_reason) == (TrajectoryStatus.COMPLETE, EndReason.IDLE)
    assert just_started.status == TrajectoryStatus.OPEN


def test_idle_close_works_in_bounded_batches(tenant):
    _idle_timeout(tenant, 60)
    sessions = [_session(tenant, f"idle-{number}", idle_for=120) for number in range(5)]

    first = trajectories_close_idle(tenant=tenant, batch_size=2, max_batches=2)

    assert (first["closed"], first["remaining"]) == (4, 1)
    second = trajectories_close_idle(tenant=tenant, batch_size=2, max_batches=2)
    assert (second["closed"], second["remaining"]) == (1, 0)
    assert {Trajectory.objects.get(pk=row.pk).status for row in sessions} == {TrajectoryStatus.COMPLETE}


def test_a_step_stored_after_selection_keeps_its_session_open(tenant):
    """The close checks again under the row lock: a session that became active meanwhile stays open."""
    _idle_timeout(tenant, 600)
    session = _session(tenant, "woke-up", idle_for=700)
    now = timezone.now()
    steps_ingest(records=[gateway_step(tenant, "woke-up")])  # lands between the selection and the lock

    from apps.trajectories.lifecycle import _close_idle_batch

    assert (
        _close_idle_batch(tenant=tenant, ids=[session.pk], cutoff=now - timedelta(seconds=600), now=now) == 0
    )
    session.refresh_from_db()
    assert session.status == TrajectoryStatus.OPEN
    assert session.step_count == 2


def test_an_idle_closed_session_qualifies_for_training(
    tenant,
    eager_tasks,
    django_capture_on_commit_callbacks,  # noqa: F811
):
    make_spec(tenant)
    _idle_timeout(tenant, 600)
    session = _session(tenant, "quiet-agent", steps=2)
    reward_append_for_agent(
        tenant_id=tenant.pk,
        session_id="quiet-agent",
        step_id=None,
        value=1,
        kind=None,
        source="user",
        label="",
        idempotency_key=None,
        timing="delayed",
        created_by="test",
    )
    _age(session, seconds=900)

    with django_capture_on_commit_callbacks(execute=True):
        close_idle_trajectories()

    verdict = Qualification.objects.get(trajectory=session)
    assert verdict.reasons == []
    assert verdict.status == "qualified"


# ---------------------------------------------------------------------------------------------- late steps


def test_a_late_step_opens_a_continuation_and_leaves_the_ended_trajectory_as_it_was(tenant, other_tenant):
    _idle_timeout(tenant, 600)
    ended = _session(tenant, "s", steps=2, idle_for=700)
    theirs = _session(other_tenant, "s", steps=1)
    trajectories_close_idle(tenant=tenant)
    before = _fields(ended)

    late = gateway_step(tenant, "s")
    assert steps_ingest(records=[late]) == 1

    assert _fields(ended) == before
    continuation = Trajectory.objects.get(tenant=tenant, session_id="s~2")
    assert continuation.pk == trajectory_id_for(tenant_id=tenant.pk, session_id="s~2")
    assert continuation.continues_id == ended.pk
    assert continuation.status == TrajectoryStatus.OPEN
    assert continuation.step_count == 1
    assert list(Step.objects.filter(trajectory=continuation).values_list("id", "index")) == [
        (Step.objects.get(pk=late["step_id"]).pk, 0)
    ]

    assert steps_ingest(records=[late]) == 0  # the same step again: idempotent
    following = gateway_step(tenant, "s")
    assert steps_ingest(records=[following]) == 1  # later steps follow into the open continuation
    continuation.refresh_from_db()
    assert continuation.step_count == 2
    assert Step.objects.get(pk=following["step_id"]).index == 1
    assert _fields(ended) == before
    theirs.refresh_from_db()
    assert (theirs.step_count, theirs.status) == (1, TrajectoryStatus.OPEN)
    assert not Trajectory.objects.filter(tenant=other_tenant, session_id="s~2").exists()


def test_an_ended_continuation_is_continued_in_turn(tenant):
    first = _session(tenant, "chain")
    trajectory_end(tenant=tenant, trajectory_id=first.pk)
    steps_ingest(records=[gateway_step(tenant, "chain")])
    second = Trajectory.objects.get(tenant=tenant, session_id="chain~2")
    trajectory_end(tenant=tenant, trajectory_id=second.pk)

    steps_ingest(records=[gateway_step(tenant, "chain")])

    third = Trajectory.objects.get(tenant=tenant, session_id="chain~3")
    assert third.continues_id == second.pk
    assert (first.pk, second.pk) == (second.continues_id, third.continues_id)
    assert Trajectory.objects.get(pk=second.pk).step_count == 1


def test_a_continuation_never_takes_a_session_id_the_tenant_already_uses(tenant):
    ended = _session(tenant, "taken")
    unrelated = _session(tenant, "taken~2", steps=2)
    trajectory_end(tenant=tenant, trajectory_id=ended.pk)

    steps_ingest(records=[gateway_step(tenant, "taken")])

    continuation = Trajectory.objects.get(tenant=tenant, continues=ended)
    assert continuation.session_id == "taken~3"
    unrelated.refresh_from_db()
    assert (unrelated.step_count, unrelated.continues_id) == (2, None)


def test_one_batch_with_late_and_on_time_steps(tenant):
    ended = _session(tenant, "over")
    trajectory_end(tenant=tenant, trajectory_id=ended.pk)
    active = _session(tenant, "active")

    batch = [gateway_step(tenant, "over"), gateway_step(tenant, "active"), gateway_step(tenant, "over")]
    assert steps_ingest(records=batch) == 3

    assert Trajectory.objects.get(pk=ended.pk).step_count == 1
    assert Trajectory.objects.get(pk=active.pk).step_count == 2
    continuation = Trajectory.objects.get(tenant=tenant, session_id="over~2")
    assert continuation.step_count == 2
    assert list(
        Step.objects.filter(trajectory=continuation).order_by("index").values_list("id", flat=True)
    ) == [Step.objects.get(pk=batch[0]["step_id"]).pk, Step.objects.get(pk=batch[2]["step_id"]).pk]


def test_ending_a_session_after_an_idle_close_ends_its_continuation(tenant):
    """/rl/end_session (trajectory_end with the session's first id) ends what is open of the session."""
    _idle_timeout(tenant, 600)
    ended = _session(tenant, "rl-late", idle_for=700)
    trajectories_close_idle(tenant=tenant)
    steps_ingest(records=[gateway_step(tenant, "rl-late")])
    before = _fields(ended)

    closed = trajectory_end(tenant=tenant, trajectory_id=ended.pk)

    assert closed.session_id == "rl-late~2"
    assert (closed.status, closed.end_reason) == (TrajectoryStatus.COMPLETE, EndReason.AGENT)
    assert _fields(ended) == before
    assert trajectory_end(tenant=tenant, trajectory_id=ended.pk).pk == ended.pk  # nothing open: unchanged
