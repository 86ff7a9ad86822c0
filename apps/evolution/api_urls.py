from django.urls import path

from apps.evolution.apis import (
    ClusterListApi,
    DecisionApproveApi,
    DecisionDetailApi,
    DecisionListApi,
    DecisionRejectApi,
    HarnessVersionDetailApi,
    HarnessVersionListApi,
    PolicyDetailApi,
    PolicyListApi,
    PolicySignalListApi,
)

urlpatterns = [
    path("evolution/policies/", PolicyListApi.as_view(), name="evolution-policy-list"),
    path("evolution/policies/<int:policy_id>/", PolicyDetailApi.as_view(), name="evolution-policy-detail"),
    path(
        "evolution/policies/<int:policy_id>/signals/",
        PolicySignalListApi.as_view(),
        name="evolution-policy-signals",
    ),
    path("evolution/clusters/", ClusterListApi.as_view(), name="evolution-cluster-list"),
    path("evolution/decisions/", DecisionListApi.as_view(), name="evolution-decision-list"),
    path(
        "evolution/decisions/<int:decision_id>/",
        DecisionDetailApi.as_view(),
        name="evolution-decision-detail",
    ),
    path(
        "evolution/decisions/<int:decision_id>/approve/",
        DecisionApproveApi.as_view(),
        name="evolution-decision-approve",
    ),
    path(
        "evolution/decisions/<int:decision_id>/reject/",
        DecisionRejectApi.as_view(),
        name="evolution-decision-reject",
    ),
    path("evolution/harness-versions/", HarnessVersionListApi.as_view(), name="evolution-harness-list"),
    path(
        "evolution/harness-versions/<int:harness_id>/",
        HarnessVersionDetailApi.as_view(),
        name="evolution-harness-detail",
    ),
]
