"""steps_ingest: the journal's group commit. New trajectories arrive with their totals counted, existing
ones are incremented, indexes follow arrival unless a step arrives after later ones (then creation order),
and a replayed batch changes nothing."""

import uuid
from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction

from apps.trajectories.models import Step, Trajectory, TrajectoryStatus, trajectory_id_for
from apps.trajectories.services import _create_trajectories, _rows_insert, steps_ingest
from tests.trajectories.factories import TrajectoryFactory
from workers.atdp.tokens import unpack_floats, unpack_ids, unpack_versions

pytestmark = pytest.mark.django_db


def _record(tenant, session, **extra):
    return {
        "step_id": str(uuid.uuid4()),
        "tenant_id": tenant.pk,
        "session_id": session,
        "endpoint": "chat",
        "prompt_tokens": 10,
        "completion_tokens": 3,
        "latency_ms": 7,
        "cost_usd": 0.25,
        "tokens": {
            "prompt_ids": [1, 2],
            "completion_ids": [3],
            "completion_logprobs": [-0.5],
            "completion_versions": [0],
        },
        **extra,
    }


def test_new_and_existing_trajectories_in_one_batch(tenant, other_tenant):
    first = [_record(tenant, "a"), _record(tenant, "a")]
    assert steps_ingest(records=first) == 2
    batch = [_record(tenant, "a"), _record(tenant, "b"), _record(tenant, "b"), _record(other_tenant, "a")]
    assert steps_ingest(records=batch) == 4
    a = Trajectory.objects.get(tenant=tenant, session_id="a")
    b = Trajectory.objects.get(tenant=tenant, session_id="b")
    theirs = Trajectory.objects.get(tenant=other_tenant, session_id="a")
    assert (a.step_count, a.prompt_tokens, a.completion_tokens, a.latency_ms) == (3, 30, 9, 21)
    assert a.cost_usd == Decimal("0.75")
    assert b.cost_usd == Decimal("0.5")
    assert theirs.step_count == 1
    assert list(a.steps.order_by("index").values_list("id", flat=True)) == [
        uuid.UUID(record["step_id"]) for record in first + batch[:1]
    ]
    assert list(b.steps.values_list("index", flat=True).order_by("index")) == [0, 1]

    assert steps_ingest(records=first + batch) == 0  # a replayed journal
    a.refresh_from_db()
    assert a.step_count == 3
    assert Step.objects.count() == 6


def test_a_step_stored_after_later_steps_of_its_session_takes_its_place_among_them(tenant):
    """Two web processes flush their journals apart: turn 2, served on one, can reach the database after a
    retry of it served later on the other. Indexes follow creation, so the retry stays after what it retries."""
    at = "2026-12-03T10:00:0{}+00:00"
    first, retry, follow_up = (_record(tenant, "s", created_at=at.format(second)) for second in (0, 5, 6))
    turn_two = _record(tenant, "s", created_at=at.format(3))
    assert steps_ingest(records=[first, retry]) == 2
    assert steps_ingest(records=[turn_two, follow_up]) == 2
    trajectory = Trajectory.objects.get(tenant=tenant, session_id="s")
    assert trajectory.step_count == 4
    assert list(trajectory.steps.order_by("index").values_list("id", "index")) == [
        (uuid.UUID(record["step_id"]), index)
        for index, record in enumerate([first, turn_two, retry, follow_up])
    ]


def test_a_trajectory_created_meanwhile_makes_the_fast_insert_step_aside(tenant):
    records = [_record(tenant, "raced"), _record(tenant, "fresh")]
    by_trajectory = {trajectory_id_for(tenant_id=tenant.pk, session_id=r["session_id"]): [r] for r in records}
    TrajectoryFactory(tenant=tenant, session_id="raced", status=TrajectoryStatus.OPEN, steps=0)
    assert _create_trajectories(by_trajectory, list(by_trajectory)) is False
    assert not Trajectory.objects.filter(session_id="fresh").exists()  # all or nothing
    assert steps_ingest(records=records) == 2
    assert {t.session_id: t.step_count for t in Trajectory.objects.filter(tenant=tenant)} == {
        "raced": 1,
        "fresh": 1,
    }


def test_a_generated_nul_character_is_stored_as_a_replacement_character(tenant):
    # PostgreSQL's jsonb and text cannot hold NUL, which a small model can emit: the batch must still land.
    record = _record(
        tenant,
        "nul",
        observation={"messages": [{"role": "user", "content": "hi\x00"}]},
        action={"text": "a\x00b", "tool_calls": []},
    )
    assert steps_ingest(records=[record, _record(tenant, "nul")]) == 2
    step = Step.objects.get(id=record["step_id"])
    assert step.action["text"] == "a\ufffdb"
    assert step.observation["messages"][0]["content"] == "hi\ufffd"
    assert step.completion_ids is not None  # the generated token ids are kept as they were


def test_every_field_is_stored_as_the_record_gave_it(tenant):
    """On PostgreSQL the steps go in through COPY, elsewhere through INSERT: either way each column holds
    what the record said (JSON with non-ASCII text, token arrays, decimals, date-times, nulls)."""
    parent, retried = uuid.uuid4(), uuid.uuid4()
    record = _record(
        tenant,
        "every-field",
        parent_step_id=str(parent),
        retry_of=str(retried),
        observation={"messages": [{"role": "user", "content": "naïve café, 東京 \\ \t tab"}]},
        state={"tools": ["search"], "nested": {"depth": [1, 2.5, None, True]}},
        action={"content": "ok", "tool_calls": []},
        result={"finish_reason": "stop"},
        tokenizer="smollm2",
        served_model="bench-model",
        model_version="v3",
        policy_version=3,
        backend_name="embedded",
        ttft_ms=None,
        cost_usd=0.000123,
        created_at="2026-11-27T08:00:01.250000+00:00",
        scopes=["inference"],
        pii_entities=[{"kind": "email", "count": 1}],
        error="",
        tokens={
            "prompt_ids": [1, 50_000, 2**31],
            "completion_ids": [7, 0],
            "completion_logprobs": [-0.25, -1.5],
            "completion_versions": [3, 3],
        },
    )
    assert steps_ingest(records=[record]) == 1
    step = Step.objects.get(pk=record["step_id"])
    assert (step.parent_step_id, step.retry_of) == (parent, retried)
    assert step.observation == record["observation"]
    assert step.state == record["state"]
    assert (step.action, step.result) == (record["action"], record["result"])
    assert (step.tokenizer, step.served_model, step.model_version) == ("smollm2", "bench-model", "v3")
    assert (step.policy_version, step.backend_name, step.ttft_ms) == (3, "embedded", None)
    assert step.cost_usd == Decimal("0.000123")
    assert step.created_at.isoformat() == "2026-11-27T08:00:01.250000+00:00"
    assert (step.scopes, step.pii_entities) == (["inference"], [{"kind": "email", "count": 1}])
    assert (step.index, step.endpoint, step.retokenized, step.loss_mask) == (0, "chat", False, None)
    assert unpack_ids(bytes(step.prompt_ids)) == [1, 50_000, 2**31]
    assert unpack_ids(bytes(step.completion_ids)) == [7, 0]
    assert unpack_floats(bytes(step.completion_logprobs)) == [-0.25, -1.5]
    assert unpack_versions(bytes(step.completion_versions)) == [3, 3]
    trajectory = step.trajectory  # new to the database: inserted the same way, with its totals
    assert (trajectory.tenant_id, trajectory.session_id, trajectory.status) == (
        tenant.pk,
        "every-field",
        "open",
    )
    assert trajectory.started_at.isoformat() == "2026-11-27T08:00:01.250000+00:00"
    assert (trajectory.step_count, trajectory.prompt_tokens, trajectory.completion_tokens) == (1, 10, 3)
    assert trajectory.cost_usd == Decimal("0.000123")


def test_a_duplicate_step_fails_the_insert_with_djangos_integrity_error(tenant):
    """What the journal sets a batch aside on (an IntegrityError) is what the COPY path raises too."""
    record = _record(tenant, "twice")
    assert steps_ingest(records=[record]) == 1
    step = Step.objects.get(pk=record["step_id"])
    step.index = 1  # only the id collides
    with pytest.raises(IntegrityError), transaction.atomic():
        _rows_insert(Step, [step])
    assert Step.objects.filter(trajectory=step.trajectory).count() == 1
