from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView

from apps.core.schema import ApiDocsPermission
from apps.metrics.views import metrics

urlpatterns = [
    path("api/v1/", include("areal_web.api_urls")),
    path(
        "api/schema/", SpectacularAPIView.as_view(permission_classes=[ApiDocsPermission]), name="api-schema"
    ),
    path(
        "api/docs/",
        SpectacularRedocView.as_view(url_name="api-schema", permission_classes=[ApiDocsPermission]),
        name="api-docs",
    ),
    path("django-admin/", admin.site.urls),
    path("metrics", metrics, name="metrics"),
    path("", include("apps.console.urls")),
]

handler404 = "apps.core.errors.page_not_found"
handler500 = "apps.core.errors.server_error"
