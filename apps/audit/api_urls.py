from django.urls import path

from apps.audit.apis import AuditEventListApi, AuditVerifyApi

urlpatterns = [
    path("audit/", AuditEventListApi.as_view(), name="audit-list"),
    path("audit/verify/", AuditVerifyApi.as_view(), name="audit-verify"),
]
