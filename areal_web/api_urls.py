"""REST API v1: every app's endpoints under /api/v1/."""

from django.urls import include, path

from apps.audit.apis import AuditEventListApi, AuditVerifyApi
from apps.inference.apis import BackendCheckApi, BackendDetailApi, BackendListApi
from apps.tenants.apis import (
    ApiKeyDetailApi,
    ApiKeyListApi,
    ApiKeyRevokeApi,
    ApiKeyRotateApi,
    MemberDetailApi,
    MemberListApi,
    PolicyDetailApi,
    TenantListApi,
)
from apps.trajectories.apis import (
    TrajectoryDetailApi,
    TrajectoryExportApi,
    TrajectoryImportApi,
    TrajectoryListApi,
    TrajectoryReplayApi,
)
from apps.trajectories.retention_apis import TrajectoryRetentionApi

urlpatterns = [
    path("tenants/", TenantListApi.as_view(), name="tenant-list"),
    path("policy/", PolicyDetailApi.as_view(), name="policy-detail"),
    path("members/", MemberListApi.as_view(), name="member-list"),
    path("members/<int:membership_id>/", MemberDetailApi.as_view(), name="member-detail"),
    path("keys/", ApiKeyListApi.as_view(), name="api-key-list"),
    path("keys/<int:key_id>/", ApiKeyDetailApi.as_view(), name="api-key-detail"),
    path("keys/<int:key_id>/revoke/", ApiKeyRevokeApi.as_view(), name="api-key-revoke"),
    path("keys/<int:key_id>/rotate/", ApiKeyRotateApi.as_view(), name="api-key-rotate"),
    path("audit/", AuditEventListApi.as_view(), name="audit-list"),
    path("audit/verify/", AuditVerifyApi.as_view(), name="audit-verify"),
    path("trajectories/", TrajectoryListApi.as_view(), name="trajectory-list"),
    path("trajectories/export/", TrajectoryExportApi.as_view(), name="trajectory-export"),
    path("trajectories/import/", TrajectoryImportApi.as_view(), name="trajectory-import"),
    path("trajectories/retention/", TrajectoryRetentionApi.as_view(), name="trajectory-retention"),
    path("trajectories/<uuid:trajectory_id>/", TrajectoryDetailApi.as_view(), name="trajectory-detail"),
    path(
        "trajectories/<uuid:trajectory_id>/replay/", TrajectoryReplayApi.as_view(), name="trajectory-replay"
    ),
    path("backends/", BackendListApi.as_view(), name="backend-list"),
    path("backends/<int:backend_id>/", BackendDetailApi.as_view(), name="backend-detail"),
    path("backends/<int:backend_id>/check/", BackendCheckApi.as_view(), name="backend-check"),
    path("", include("apps.rewards.api_urls")),
    path("", include("apps.qualification.api_urls")),
    path("", include("apps.annotation.api_urls")),
    path("", include("apps.evaluation.api_urls")),
    path("", include("apps.releases.api_urls")),
    path("", include("apps.training.api_urls")),
]
