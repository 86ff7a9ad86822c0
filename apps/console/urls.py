from django.urls import include, path

from apps.console import views

app_name = "console"

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", views.login_view, name="login"),
    path("logout/", views.logout_view, name="logout"),
    path("tenant/switch/", views.tenant_switch, name="tenant-switch"),
    path("settings/members/", views.members, name="members"),
    path("settings/members/<int:membership_id>/role/", views.member_role, name="member-role"),
    path("settings/members/<int:membership_id>/remove/", views.member_remove, name="member-remove"),
    path("settings/keys/", views.keys, name="keys"),
    path("settings/keys/<int:key_id>/revoke/", views.key_revoke, name="key-revoke"),
    path("settings/keys/<int:key_id>/rotate/", views.key_rotate, name="key-rotate"),
    path("settings/policy/", views.policy, name="policy"),
    path("audit/", views.audit, name="audit"),
    path("trajectories/", views.trajectories, name="trajectories"),
    path("trajectories/<uuid:trajectory_id>/", views.trajectory_detail, name="trajectory-detail"),
    path("trajectories/<uuid:trajectory_id>/replay/", views.trajectory_replay, name="trajectory-replay"),
    path("backends/", views.backends, name="backends"),
    path("backends/<int:backend_id>/check/", views.backend_check, name="backend-check"),
    path("backends/<int:backend_id>/drain/", views.backend_drain, name="backend-drain"),
    path("", include("apps.qualification.urls")),
    path("", include("apps.annotation.urls")),
    path("", include("apps.evaluation.urls")),
    path("", include("apps.releases.urls")),
    path("", include("apps.training.urls")),
]
