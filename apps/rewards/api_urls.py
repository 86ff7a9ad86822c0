from django.urls import path

from apps.rewards.apis import (
    EvaluatorDetailApi,
    EvaluatorListApi,
    EvaluatorRunApi,
    EvaluatorRunListApi,
    RewardDetailApi,
    RewardFeedbackApi,
    RewardListApi,
    RewardSpecDetailApi,
    RewardSpecListApi,
    TrajectoryRewardSummaryApi,
)

urlpatterns = [
    path("evaluators/", EvaluatorListApi.as_view(), name="evaluator-list"),
    path("evaluators/<int:evaluator_id>/", EvaluatorDetailApi.as_view(), name="evaluator-detail"),
    path("evaluators/<int:evaluator_id>/run/", EvaluatorRunApi.as_view(), name="evaluator-run"),
    path("evaluators/<int:evaluator_id>/runs/", EvaluatorRunListApi.as_view(), name="evaluator-run-list"),
    path("reward-specs/", RewardSpecListApi.as_view(), name="reward-spec-list"),
    path("reward-specs/<int:spec_id>/", RewardSpecDetailApi.as_view(), name="reward-spec-detail"),
    path("rewards/", RewardListApi.as_view(), name="reward-list"),
    path("rewards/feedback/", RewardFeedbackApi.as_view(), name="reward-feedback"),
    path(
        "rewards/trajectories/<uuid:trajectory_id>/",
        TrajectoryRewardSummaryApi.as_view(),
        name="reward-trajectory-summary",
    ),
    path("rewards/<uuid:reward_id>/", RewardDetailApi.as_view(), name="reward-detail"),
]
