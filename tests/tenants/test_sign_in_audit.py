"""Sign-ins, failures and sign-outs are audited in every tenant of the person, through the console's sign-in
page and the Django admin's; a failure for an unknown username writes nothing to any tenant."""

import pytest
from django.test import Client

from apps.audit.models import AuditEvent
from apps.tenants.permissions import Role
from tests.tenants.factories import PASSWORD, MembershipFactory

pytestmark = pytest.mark.django_db


def _events(tenant, verb):
    return list(AuditEvent.objects.filter(tenant=tenant, verb=verb).values_list("data", flat=True))


def test_console_sign_in_failure_and_sign_out_are_audited_in_each_tenant(tenant, other_tenant):
    membership = MembershipFactory(tenant=tenant, role=Role.OPERATOR)
    MembershipFactory(tenant=other_tenant, user=membership.user, role=Role.VIEWER)
    user = membership.user
    client = Client(REMOTE_ADDR="127.0.0.5")
    assert client.post("/login/", {"username": user.username, "password": "wrong"}).status_code == 200
    assert client.post("/login/", {"username": user.username, "password": PASSWORD}).status_code == 302
    assert client.post("/logout/").status_code == 302
    for each in (tenant, other_tenant):
        assert _events(each, "auth.sign_in_failed") == [
            {"user": user.username, "address": "127.0.0.5", "path": "/login/"}
        ]
        assert _events(each, "auth.sign_in") == [
            {"user": user.username, "address": "127.0.0.5", "path": "/login/"}
        ]
        assert len(_events(each, "auth.sign_out")) == 1
    signed_in = AuditEvent.objects.get(tenant=tenant, verb="auth.sign_in")
    assert (signed_in.actor_kind, signed_in.target_id) == ("user", str(user.pk))


def test_admin_site_sign_in_is_audited(tenant):
    membership = MembershipFactory(tenant=tenant, role=Role.ADMIN)
    membership.user.is_staff = True
    membership.user.save()
    client = Client(REMOTE_ADDR="127.0.0.6")
    response = client.post(
        "/django-admin/login/?next=/django-admin/",
        {"username": membership.user.username, "password": PASSWORD, "next": "/django-admin/"},
    )
    assert response.status_code == 302
    assert _events(tenant, "auth.sign_in") == [
        {"user": membership.user.username, "address": "127.0.0.6", "path": "/django-admin/login/"}
    ]


def test_a_failure_for_an_unknown_username_touches_no_tenant(tenant):
    before = AuditEvent.objects.count()
    assert Client().post("/login/", {"username": "nobody-here", "password": "x"}).status_code == 200
    assert AuditEvent.objects.count() == before
