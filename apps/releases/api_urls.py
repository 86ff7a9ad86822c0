from django.urls import path

from apps.releases.apis import (
    ReleaseAbortApi,
    ReleaseAnalysisListApi,
    ReleaseAnalyzeApi,
    ReleaseApproveApi,
    ReleaseDetailApi,
    ReleaseEventListApi,
    ReleaseListApi,
    ReleaseResumeApi,
    ReleaseRollbackApi,
    ReleaseStartApi,
    RoutingListApi,
    ServingHistoryApi,
)

urlpatterns = [
    path("releases/", ReleaseListApi.as_view(), name="release-list"),
    path("releases/<int:release_id>/", ReleaseDetailApi.as_view(), name="release-detail"),
    path("releases/<int:release_id>/events/", ReleaseEventListApi.as_view(), name="release-events"),
    path("releases/<int:release_id>/analyses/", ReleaseAnalysisListApi.as_view(), name="release-analyses"),
    path("releases/<int:release_id>/start/", ReleaseStartApi.as_view(), name="release-start"),
    path("releases/<int:release_id>/approve/", ReleaseApproveApi.as_view(), name="release-approve"),
    path("releases/<int:release_id>/rollback/", ReleaseRollbackApi.as_view(), name="release-rollback"),
    path("releases/<int:release_id>/abort/", ReleaseAbortApi.as_view(), name="release-abort"),
    path("releases/<int:release_id>/resume/", ReleaseResumeApi.as_view(), name="release-resume"),
    path("releases/<int:release_id>/analyze/", ReleaseAnalyzeApi.as_view(), name="release-analyze"),
    path("serving-history/", ServingHistoryApi.as_view(), name="serving-history"),
    path("routing/", RoutingListApi.as_view(), name="routing-list"),
]
