"""Per-arm samples of live traffic for guardrail analysis: production sessions (eval, replay and annotation
traffic excluded) whose model calls a version served since the canary began.

Reads the calls through apps.trajectories' selectors (`production_calls_of_version`, `trajectories_by_id`)."""

from collections import defaultdict

from apps.rewards.selectors import feedback_summary, training_reward
from apps.trajectories.selectors import production_calls_of_version, trajectories_by_id

MAX_TRAJECTORIES_PER_ARM = 1000


def arm_samples(*, tenant, model: str, version: str, since) -> dict[str, list[float]]:
    """{metric: per-sample values} for one arm: error_rate and latency_p95 per model call, reward_mean,
    user_correction_rate and cost_per_task per session."""
    steps = production_calls_of_version(
        tenant=tenant, model=model, version=version, since=since, limit=20 * MAX_TRAJECTORIES_PER_ARM
    )
    errors: list = []
    latencies: list = []
    cost_by_trajectory: defaultdict = defaultdict(float)
    for trajectory_id, error, aborted, latency_ms, cost in steps:
        failed = bool(error) and not aborted
        errors.append(1.0 if failed else 0.0)
        if not failed and not aborted:
            latencies.append(float(latency_ms))
        if len(cost_by_trajectory) < MAX_TRAJECTORIES_PER_ARM or trajectory_id in cost_by_trajectory:
            cost_by_trajectory[trajectory_id] += float(cost or 0)
    rewards, corrections = [], []
    for trajectory in trajectories_by_id(tenant=tenant, trajectory_ids=list(cost_by_trajectory)):
        reward = training_reward(tenant=tenant, trajectory=trajectory)
        if reward is not None:
            rewards.append(float(reward))
        corrections.append(
            1.0 if feedback_summary(tenant=tenant, trajectory_id=trajectory.pk)["corrections"] else 0.0
        )
    return {
        "error_rate": errors,
        "latency_p95": latencies,
        "cost_per_task": list(cost_by_trajectory.values()),
        "reward_mean": rewards,
        "user_correction_rate": corrections,
    }
