"""Celery tasks of apps.evolution: the control plane's tick (beat) and a gate's measurement (eval queue)."""

from celery import shared_task


@shared_task(name="evolution.tick", ignore_result=True)
def tick() -> int:
    """Beat (every AREAL_EVOLUTION_TICK_SECONDS): one tick per enabled policy (apps.evolution.control)."""
    from apps.evolution.control import evolution_tick_all

    return evolution_tick_all()


@shared_task(name="evolution.evaluate", acks_late=True, max_retries=0, soft_time_limit=1800, time_limit=1900)
def evaluate(tenant_id: int, decision_id: int) -> dict:
    """Measures an evaluate decision's versions on the policy's environment gate; the next tick compares them.
    Idempotent: a version already measured by that gate is not measured again."""
    from apps.evolution.actions import gate_run

    return gate_run(tenant_id=tenant_id, decision_id=decision_id)


@shared_task(name="evolution.propose", acks_late=True, max_retries=0, soft_time_limit=600, time_limit=660)
def propose(tenant_id: int, decision_id: int) -> str:
    """Drafts an update_harness decision's harness with the policy's proposer and registers its candidate
    version. Idempotent: a decision no longer running is skipped."""
    from apps.evolution.actions import harness_run

    return harness_run(tenant_id=tenant_id, decision_id=decision_id)
