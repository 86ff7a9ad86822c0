"""REST API v1: every app's endpoints under /api/v1/, each app's from its own `api_urls.py`."""

from django.urls import include, path

urlpatterns = [
    path("", include(f"apps.{app}.api_urls"))
    for app in (
        "tenants",
        "audit",
        "trajectories",
        "inference",
        "rewards",
        "qualification",
        "annotation",
        "evaluation",
        "releases",
        "training",
        "evolution",
    )
]
