"""Trajectories with real steps (packed token arrays) and reward specs, for the reward, qualification and
annotation tests."""

import uuid
from datetime import timedelta

from django.utils import timezone

from apps.audit.services import Actor
from apps.rewards.models import Reward
from apps.rewards.services import reward_spec_create
from apps.trajectories.models import Step, Trajectory, trajectory_id_for
from workers.atdp.tokens import pack_floats, pack_ids, pack_versions

SYSTEM = Actor.system("test")


def make_trajectory(
    tenant,
    *,
    session_id=None,
    agent_name="helper",
    task_id="task-1",
    group_id="task-1#0",
    steps=2,
    status="complete",
    purpose="production",
    consent="full",
    text="answer",
    started_at=None,
    with_tokens=True,
    **fields,
) -> Trajectory:
    """A trajectory with `steps` llm_call steps, each with consistent token ids and logprobs, plus a tool
    call on the first step. `text` varies the content (and so the content hash)."""
    session_id = session_id or "s-" + uuid.uuid4().hex[:10]
    trajectory = Trajectory.objects.create(
        id=trajectory_id_for(tenant_id=tenant.pk, session_id=session_id),
        tenant=tenant,
        session_id=session_id,
        agent_name=agent_name,
        task_id=task_id,
        group_id=group_id,
        status=status,
        purpose=purpose,
        consent=consent,
        started_at=started_at or timezone.now(),
        ended_at=timezone.now() if status != "open" else None,
        step_count=steps,
        prompt_tokens=10 * steps,
        completion_tokens=3 * steps,
        **fields,
    )
    rows = []
    for index in range(steps):
        action = {"text": f"{text} {index}", "tool_calls": []}
        if index == 0:
            action["tool_calls"] = [
                {
                    "id": "call-1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"q": "weather"}'},
                }
            ]
        row = Step(
            tenant=tenant,
            trajectory=trajectory,
            index=index,
            kind="llm_call",
            observation={"messages": [{"role": "user", "content": f"question {index} for {text}"}]},
            action=action,
            result={"finish_reason": "stop"},
            prompt_tokens=10,
            completion_tokens=3,
            created_at=trajectory.started_at + timedelta(seconds=index),
        )
        if with_tokens:
            row.prompt_ids = pack_ids(list(range(10)))
            row.completion_ids = pack_ids([5, 6, 7])
            row.completion_logprobs = pack_floats([-0.1, -0.2, -0.3])
            row.completion_versions = pack_versions([1, 1, 1])
            row.tokenizer = "tok"
        rows.append(row)
    Step.objects.bulk_create(rows)
    return trajectory


def make_spec(tenant, **fields):
    defaults = {
        "name": "quality",
        "kind": "numeric",
        "minimum": 0.0,
        "maximum": 1.0,
        "is_training_reward": True,
    }
    return reward_spec_create(tenant=tenant, actor=SYSTEM, **{**defaults, **fields})


def make_reward(trajectory, *, source: str, value: float, **fields) -> Reward:
    """A trajectory reward from any source, as its own path (evaluator worker, annotator, gateway) would
    have stored it: for tests of what rewards mean once stored, not of who may post them."""
    return Reward.objects.create(
        tenant_id=trajectory.tenant_id,
        trajectory=trajectory,
        target="trajectory",
        value=value,
        source=source,
        created_by=f"test-{source}",
        **fields,
    )
