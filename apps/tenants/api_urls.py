from django.urls import path

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

urlpatterns = [
    path("tenants/", TenantListApi.as_view(), name="tenant-list"),
    path("policy/", PolicyDetailApi.as_view(), name="policy-detail"),
    path("members/", MemberListApi.as_view(), name="member-list"),
    path("members/<int:membership_id>/", MemberDetailApi.as_view(), name="member-detail"),
    path("keys/", ApiKeyListApi.as_view(), name="api-key-list"),
    path("keys/<int:key_id>/", ApiKeyDetailApi.as_view(), name="api-key-detail"),
    path("keys/<int:key_id>/revoke/", ApiKeyRevokeApi.as_view(), name="api-key-revoke"),
    path("keys/<int:key_id>/rotate/", ApiKeyRotateApi.as_view(), name="api-key-rotate"),
]
