"""Console pages, included into the console's URL namespace."""

from django.urls import path

from apps.tenants import views

urlpatterns = [
    path("settings/members/", views.members, name="members"),
    path(
        "settings/members/<int:membership_id>/invite-link/",
        views.member_invite_link,
        name="member-invite-link",
    ),
    path("invitation/<str:uidb64>/<str:token>/", views.invitation, name="invitation"),
    path("tenants/new/", views.tenant_new, name="tenant-new"),
    path("settings/members/<int:membership_id>/role/", views.member_role, name="member-role"),
    path("settings/members/<int:membership_id>/remove/", views.member_remove, name="member-remove"),
    path("settings/keys/", views.keys, name="keys"),
    path("settings/keys/<int:key_id>/revoke/", views.key_revoke, name="key-revoke"),
    path("settings/keys/<int:key_id>/rotate/", views.key_rotate, name="key-rotate"),
    path("settings/policy/", views.policy, name="policy"),
]
