from django.urls import path

from apps.trajectories.apis import (
    TrajectoryDetailApi,
    TrajectoryEndApi,
    TrajectoryExportApi,
    TrajectoryImportApi,
    TrajectoryLifecycleApi,
    TrajectoryListApi,
    TrajectoryReplayApi,
)
from apps.trajectories.retention_apis import TrajectoryRetentionApi

urlpatterns = [
    path("trajectories/", TrajectoryListApi.as_view(), name="trajectory-list"),
    path("trajectories/export/", TrajectoryExportApi.as_view(), name="trajectory-export"),
    path("trajectories/import/", TrajectoryImportApi.as_view(), name="trajectory-import"),
    path("trajectories/retention/", TrajectoryRetentionApi.as_view(), name="trajectory-retention"),
    path("trajectories/<uuid:trajectory_id>/", TrajectoryDetailApi.as_view(), name="trajectory-detail"),
    path(
        "trajectories/<uuid:trajectory_id>/replay/", TrajectoryReplayApi.as_view(), name="trajectory-replay"
    ),
    path("trajectories/<uuid:trajectory_id>/end/", TrajectoryEndApi.as_view(), name="trajectory-end"),
    path(
        "trajectories/<uuid:trajectory_id>/lifecycle/",
        TrajectoryLifecycleApi.as_view(),
        name="trajectory-lifecycle",
    ),
]
