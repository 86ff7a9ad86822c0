"""The console's trajectory browser search (selectors, tenant first): `selectors.trajectory_list`'s filters
and, on top, a trajectory's content, the model version that served it and its outcome. Kept beside
`selectors` rather than in it: these read only this app's rows (steps, and rewards through their relation to
trajectories), so the layering stays as `selectors` has it."""

from django.db.models import Exists, OuterRef, Q, TextField
from django.db.models.functions import Cast

from apps.tenants.models import Tenant
from apps.trajectories.models import Step
from apps.trajectories.selectors import trajectory_list_with_reward_mean

# A reward of at least 0.5 counts as a success, as the overview's success rate counts it (the environments'
# 0/1 check); a trajectory's outcome is judged on the mean of its rewards.
SUCCESS_REWARD = 0.5
OUTCOMES = {
    "succeeded": "succeeded (mean reward ≥ 0.5)",
    "failed": "failed (mean reward < 0.5)",
    "unscored": "no reward yet",
    "errored": "a call failed",
}


def trajectory_search(
    *, tenant: Tenant, text: str = "", model_version: str = "", outcome: str = "", **filters
):
    """`trajectory_list_with_reward_mean(tenant, **filters)`, newest first, narrowed to trajectories with a
    step whose messages, answer or tool results contain `text` (case-insensitive), a step served by
    `model_version` ("3" or "v3"), and the `outcome` named (one of OUTCOMES)."""
    trajectories = trajectory_list_with_reward_mean(tenant=tenant, **filters)
    steps = Step.objects.filter(tenant=tenant, trajectory=OuterRef("pk"))
    if text:
        searched = steps.annotate(
            observation_text=Cast("observation", TextField()),
            action_text=Cast("action", TextField()),
            result_text=Cast("result", TextField()),
        ).filter(
            Q(observation_text__icontains=text)
            | Q(action_text__icontains=text)
            | Q(result_text__icontains=text)
        )
        trajectories = trajectories.filter(Exists(searched))
    if model_version:
        trajectories = trajectories.filter(
            Exists(steps.filter(model_version=str(model_version).strip().removeprefix("v")))
        )
    if outcome == "succeeded":
        trajectories = trajectories.filter(reward_mean__gte=SUCCESS_REWARD)
    elif outcome == "failed":
        trajectories = trajectories.filter(reward_mean__lt=SUCCESS_REWARD)
    elif outcome == "unscored":
        trajectories = trajectories.filter(reward_mean__isnull=True)
    elif outcome == "errored":
        trajectories = trajectories.filter(Exists(steps.exclude(error="")))
    return trajectories
