"""Running a trajectory's evaluators on a worker (the task rewards.run_evaluators): each rule evaluator's
result appended as a reward through services.evaluator_run; an evaluator that cannot judge is logged and
skipped, the others still run. An llm_judge evaluator calls a model, so it gets its own task
(rewards.run_judge, run in apps.loop.judging) and cannot hold the rule evaluators up."""

import logging

from apps.core.errors import DomainError
from apps.core.tasking import task_enqueue
from apps.rewards.models import EvaluatorKind
from apps.rewards.selectors import evaluator_list
from apps.rewards.services import evaluator_run
from apps.trajectories.choices import Purpose
from apps.trajectories.selectors import dangerously_trajectory_with_tenant
from workers.rewards.evaluators import EvaluatorError

logger = logging.getLogger(__name__)


def evaluators_run(*, trajectory_id: str, evaluator_id: int | None = None) -> dict:
    """Runs the trajectory's tenant's enabled evaluators (those for its agent or every agent), or only
    `evaluator_id`, and appends each result as an evaluator reward. Tenant-scoped by the trajectory.
    Idempotent: one reward per evaluator version and trajectory (deterministic idempotency key). An
    evaluator that cannot judge, or whose value falls outside its spec, is logged and skipped (terminal,
    not retried). Each stored reward enqueues the trajectory's qualification."""
    trajectory = dangerously_trajectory_with_tenant(trajectory_id)
    if trajectory is None:
        return {"trajectory_id": trajectory_id, "missing": True}
    evaluators = evaluator_list(tenant=trajectory.tenant, agent_name=trajectory.agent_name, enabled=True)
    if evaluator_id is not None:
        evaluators = evaluators.filter(pk=evaluator_id)
    results: dict[str, float | str] = {}
    for evaluator in evaluators:
        if evaluator.kind == EvaluatorKind.LLM_JUDGE:
            if trajectory.purpose == Purpose.EVAL:  # eval traffic holds the judge's own calls
                results[str(evaluator)] = "skipped: eval traffic is not judged"
                continue
            task_enqueue("rewards.run_judge", str(trajectory.pk), evaluator.pk)
            results[str(evaluator)] = "queued: rewards.run_judge"
            continue
        try:
            reward = evaluator_run(evaluator=evaluator, trajectory=trajectory)
            results[str(evaluator)] = reward.value
        except (EvaluatorError, DomainError) as error:
            logger.warning("evaluator %s skipped trajectory %s: %s", evaluator, trajectory_id, error)
            results[str(evaluator)] = f"skipped: {error}"
    return {"trajectory_id": trajectory_id, "results": results}
