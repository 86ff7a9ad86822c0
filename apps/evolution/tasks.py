"""Celery tasks of apps.evolution: the control plane's tick (beat, one task per policy) and a gate's measurement
(eval queue)."""

from datetime import datetime

from celery import shared_task
from django.utils import timezone

# A policy's tick reads a window of traffic and clusters its tool failures: bounded work (capped reads,
# linear patterns on capped text), so a tick that runs this long is stopped (its transaction rolls back and
# its row lock is released) and the next beat ticks the policy again.
TICK_SOFT_TIME_LIMIT = 120
TICK_TIME_LIMIT = 150


@shared_task(name="evolution.tick", ignore_result=True, max_retries=0, soft_time_limit=60, time_limit=90)
def tick() -> int:
    """Beat (every AREAL_EVOLUTION_TICK_SECONDS): enqueues one `evolution.tick_policy` per enabled policy of
    every tenant, so a slow policy (or tenant) holds up no other. Returns how many it enqueued."""
    from apps.loop.control import evolution_tick_due

    enqueued_at = timezone.now().isoformat()
    due = evolution_tick_due()
    for tenant_id, policy_id in due:
        tick_policy.apply_async(args=[tenant_id, policy_id], kwargs={"enqueued_at": enqueued_at})
    return len(due)


@shared_task(
    name="evolution.tick_policy",
    ignore_result=True,
    max_retries=0,
    soft_time_limit=TICK_SOFT_TIME_LIMIT,
    time_limit=TICK_TIME_LIMIT,
)
def tick_policy(tenant_id: int, policy_id: int, enqueued_at: str | None = None) -> bool:
    """One policy's tick under its own row lock (apps.loop.control.evolution_tick_policy). Idempotent: a
    policy ticked since `enqueued_at` (a second delivery, a backlog) is not ticked again."""
    from apps.loop.control import evolution_tick_policy

    return evolution_tick_policy(
        tenant_id=tenant_id,
        policy_id=policy_id,
        enqueued_at=datetime.fromisoformat(enqueued_at) if enqueued_at else None,
    )


@shared_task(name="evolution.evaluate", acks_late=True, max_retries=0, soft_time_limit=1800, time_limit=1900)
def evaluate(tenant_id: int, decision_id: int) -> dict:
    """Measures an evaluate decision's versions on the policy's environment gate; the next tick compares them.
    Idempotent: a version already measured by that gate is not measured again."""
    from apps.loop.actions import gate_run

    return gate_run(tenant_id=tenant_id, decision_id=decision_id)


@shared_task(name="evolution.propose", acks_late=True, max_retries=0, soft_time_limit=600, time_limit=660)
def propose(tenant_id: int, decision_id: int) -> str:
    """Drafts an update_harness decision's harness with the policy's proposer and registers its candidate
    version. Idempotent: a decision no longer running is skipped."""
    from apps.loop.actions import harness_run

    return harness_run(tenant_id=tenant_id, decision_id=decision_id)
