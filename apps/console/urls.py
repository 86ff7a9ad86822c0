from django.urls import include, path

from apps.console import views

app_name = "console"

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", views.login_view, name="login"),
    path("logout/", views.logout_view, name="logout"),
    path("tenant/switch/", views.tenant_switch, name="tenant-switch"),
    path("", include("apps.tenants.urls")),
    path("", include("apps.audit.urls")),
    path("", include("apps.inference.urls")),
    path("", include("apps.trajectories.urls")),
    path("", include("apps.qualification.urls")),
    path("", include("apps.annotation.urls")),
    path("", include("apps.evaluation.urls")),
    path("", include("apps.releases.urls")),
    path("", include("apps.training.urls")),
    path("", include("apps.evolution.urls")),
    path("", include("apps.rewards.urls")),
]
