"""Trajectories and steps written straight to their tables: for tests of what stored rows mean. To store them
the way production does (gateway records through `steps_ingest`, ATDP through `trajectory_import`), use
tests/trajectories/builders.py."""

from datetime import timedelta

import factory
from django.utils import timezone

from apps.trajectories.models import (
    Purpose,
    Step,
    StepKind,
    Trajectory,
    TrajectoryStatus,
    trajectory_id_for,
)
from tests.tenants.factories import TenantFactory
from workers.atdp.tokens import pack_floats, pack_ids, pack_versions


def _lookup_call() -> dict:
    return {
        "id": "call-1",
        "type": "function",
        "function": {"name": "lookup", "arguments": '{"q": "weather"}'},
    }


class TrajectoryFactory(factory.django.DjangoModelFactory):
    """A trajectory with `steps` llm_call steps (see StepFactory), its totals counted. `text` varies the
    steps' content (and so the content hash); `with_tokens=False` leaves the token arrays out."""

    class Meta:
        model = Trajectory

    tenant = factory.SubFactory(TenantFactory)
    session_id = factory.Sequence(lambda number: f"session-{number}")
    id = factory.LazyAttribute(
        lambda trajectory: trajectory_id_for(tenant_id=trajectory.tenant.pk, session_id=trajectory.session_id)
    )
    agent_name = "helper"
    task_id = "task-1"
    group_id = "task-1#0"
    status = TrajectoryStatus.COMPLETE
    purpose = Purpose.PRODUCTION
    consent = "full"
    started_at = factory.LazyFunction(timezone.now)
    ended_at = factory.LazyAttribute(
        lambda trajectory: None if trajectory.status == TrajectoryStatus.OPEN else timezone.now()
    )
    # Not fields: how the steps are made (taken out in _create).
    steps = 2
    text = "answer"
    with_tokens = True
    step_count = factory.SelfAttribute("steps")
    prompt_tokens = factory.LazyAttribute(lambda trajectory: 10 * trajectory.steps)
    completion_tokens = factory.LazyAttribute(lambda trajectory: 3 * trajectory.steps)

    @classmethod
    def _create(cls, model_class, *args, steps, text, with_tokens, **kwargs):
        trajectory = super()._create(model_class, *args, **kwargs)
        Step.objects.bulk_create(
            StepFactory.build(trajectory=trajectory, index=index, text=text, with_tokens=with_tokens)
            for index in range(steps)
        )
        return trajectory

    @classmethod
    def _build(cls, model_class, *args, steps, text, with_tokens, **kwargs):
        return super()._build(model_class, *args, **kwargs)


class StepFactory(factory.django.DjangoModelFactory):
    """An llm_call step appended to its trajectory (the trajectory's totals are left as they are): a user
    question, an answer with a tool call on the first step, and consistent token ids, logprobs and
    versions unless `with_tokens=False`."""

    class Meta:
        model = Step

    class Params:
        text = "answer"
        with_tokens = True

    trajectory = factory.SubFactory(TrajectoryFactory, steps=0)
    tenant = factory.SelfAttribute("trajectory.tenant")
    index = factory.LazyAttribute(lambda step: step.trajectory.steps.count())
    kind = StepKind.LLM_CALL
    observation = factory.LazyAttribute(
        lambda step: {"messages": [{"role": "user", "content": f"question {step.index} for {step.text}"}]}
    )
    action = factory.LazyAttribute(
        lambda step: {
            "text": f"{step.text} {step.index}",
            "tool_calls": [_lookup_call()] if step.index == 0 else [],
        }
    )
    result = factory.Dict({"finish_reason": "stop"})
    prompt_tokens = 10
    completion_tokens = 3
    created_at = factory.LazyAttribute(
        lambda step: step.trajectory.started_at + timedelta(seconds=step.index)
    )
    tokenizer = factory.LazyAttribute(lambda step: "tok" if step.with_tokens else "")
    prompt_ids = factory.LazyAttribute(lambda step: pack_ids(list(range(10))) if step.with_tokens else None)
    completion_ids = factory.LazyAttribute(lambda step: pack_ids([5, 6, 7]) if step.with_tokens else None)
    completion_logprobs = factory.LazyAttribute(
        lambda step: pack_floats([-0.1, -0.2, -0.3]) if step.with_tokens else None
    )
    completion_versions = factory.LazyAttribute(
        lambda step: pack_versions([1, 1, 1]) if step.with_tokens else None
    )
