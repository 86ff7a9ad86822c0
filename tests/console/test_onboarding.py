"""Tenant admins onboard without the Django admin (issue 29): invite a person by email or username with a
role (the role select never starts on Admin); the invited person sets a password through the link and is
signed in; a staff user creates a tenant; the page that shows a new key once shows the two lines each client
needs. Roles that may not invite change nothing; another tenant's member is a 404."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from apps.audit.models import AuditEvent
from apps.tenants.models import Membership, Tenant
from apps.tenants.permissions import Role
from tests.tenants.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db
NEW_PASSWORD = "a long new passphrase 42"


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _invite_link(page: str) -> str:
    return re.search(r'id="invite-link">https?://[^/]+(/invitation/[^<]+/)</code>', page).group(1)


def test_the_role_select_never_starts_on_admin(member):
    page = _client(member(Role.ADMIN)).get("/settings/members/").content.decode()
    select = page.split('id="invite"', 1)[1].split('name="role"', 1)[1].split("</select>")[0]
    first_option = re.search(r'<option value="([^"]*)"', select).group(1)
    assert first_option == ""
    assert re.findall(r'<option value="([^"]*)" selected', select) == [""]  # the prompt, not Admin


def test_an_admin_invites_a_new_person_who_sets_a_password_and_is_signed_in(member, tenant):
    admin = _client(member(Role.ADMIN))
    response = admin.post("/settings/members/", {"user": "ada@example.test", "role": "annotator"})
    assert response.status_code == 200
    invited = get_user_model().objects.get(email="ada@example.test")
    assert invited.username == "ada"
    assert not invited.has_usable_password()
    assert Membership.objects.get(tenant=tenant, user=invited).role == Role.ANNOTATOR
    assert AuditEvent.objects.filter(tenant=tenant, verb="member.invite").count() == 1
    link = _invite_link(response.content.decode())

    guest = Client()
    assert "Welcome, ada" in guest.get(link).content.decode()
    mismatched = guest.post(link, {"password": NEW_PASSWORD, "repeated": "something else"})
    assert mismatched.status_code == 400
    assert "The two passwords differ." in mismatched.content.decode()
    too_short = guest.post(link, {"password": "abc", "repeated": "abc"})
    assert too_short.status_code == 400
    invited.refresh_from_db()
    assert not invited.has_usable_password()

    done = guest.post(link, {"password": NEW_PASSWORD, "repeated": NEW_PASSWORD})
    assert done.status_code == 302
    assert guest.get("/").status_code == 200  # signed in, in the tenant
    invited.refresh_from_db()
    assert invited.check_password(NEW_PASSWORD)
    assert AuditEvent.objects.filter(tenant=tenant, verb="member.password_set").count() == 1
    assert Client().get(link).status_code == 404  # the link worked once
    assert Client().login(username="ada", password=NEW_PASSWORD)


def test_an_existing_account_is_added_at_once(member, tenant):
    person = UserFactory(username="grace")
    response = _client(member(Role.ADMIN)).post("/settings/members/", {"user": "GRACE", "role": "viewer"})
    assert response.status_code == 302
    assert Membership.objects.get(tenant=tenant, user=person).role == Role.VIEWER
    assert AuditEvent.objects.filter(tenant=tenant, verb="member.add").count() == 1


def test_an_invitation_needs_a_role(member, tenant):
    response = _client(member(Role.ADMIN)).post("/settings/members/", {"user": "nobody@example.test"})
    assert response.status_code == 400
    assert not get_user_model().objects.filter(email="nobody@example.test").exists()


@pytest.mark.parametrize("role", [Role.OPERATOR, Role.VIEWER, Role.ANNOTATOR])
def test_other_roles_cannot_invite(member, tenant, role):
    response = _client(member(role)).post("/settings/members/", {"user": "eve@example.test", "role": "admin"})
    assert response.status_code == 403
    assert not get_user_model().objects.filter(email="eve@example.test").exists()


def test_another_tenants_member_has_no_invitation_link_here(member, tenant, other_tenant):
    theirs = MembershipFactory(tenant=other_tenant, user=UserFactory())
    theirs.user.set_unusable_password()
    theirs.user.save()
    response = _client(member(Role.ADMIN)).post(f"/settings/members/{theirs.pk}/invite-link/")
    assert response.status_code == 404


def test_an_altered_link_does_not_work(member, tenant):
    response = _client(member(Role.ADMIN)).post(
        "/settings/members/", {"user": "lin@example.test", "role": "viewer"}
    )
    link = _invite_link(response.content.decode())
    altered = link.rstrip("/")[:-3] + "abc/"
    assert Client().get(altered).status_code == 404
    assert Client().post(altered, {"password": NEW_PASSWORD, "repeated": NEW_PASSWORD}).status_code == 404


def test_a_staff_user_creates_a_tenant_and_becomes_its_admin(member, tenant):
    staff = UserFactory(is_staff=True)
    client = _client(staff)
    response = client.post("/tenants/new/", {"slug": "initech", "name": "Initech", "admin": ""})
    assert response.status_code == 302
    created = Tenant.objects.get(slug="initech")
    assert Membership.objects.get(tenant=created, user=staff).role == Role.ADMIN
    assert AuditEvent.objects.filter(tenant=created, verb="tenant.create").count() == 1
    assert "Initech" in client.get("/").content.decode()  # the console switched to it
    again = client.post("/tenants/new/", {"slug": "initech", "name": "Again", "admin": ""})
    assert again.status_code == 400
    assert "already" in again.content.decode()


def test_a_staff_user_names_another_first_admin(tenant):
    client = _client(UserFactory(is_staff=True))
    response = client.post(
        "/tenants/new/", {"slug": "umbrella", "name": "Umbrella", "admin": "boss@example.test"}
    )
    assert response.status_code == 200
    assert "/invitation/" in response.content.decode()
    boss = get_user_model().objects.get(email="boss@example.test")
    assert Membership.objects.get(tenant__slug="umbrella", user=boss).role == Role.ADMIN


def test_only_staff_create_tenants(member, tenant):
    response = _client(member(Role.ADMIN)).post("/tenants/new/", {"slug": "nope", "name": "Nope"})
    assert response.status_code == 403
    assert not Tenant.objects.filter(slug="nope").exists()


def test_the_new_key_page_shows_the_lines_each_client_needs(member, tenant):
    response = _client(member(Role.ADMIN)).post(
        "/settings/keys/", {"name": "agent", "scopes": ["inference"]}, HTTP_HOST="localhost:8000"
    )
    page = response.content.decode()
    raw = re.search(r'id="new-key">([^<]+)<', page).group(1).strip()
    assert f'OpenAI(base_url="http://localhost:8000/v1", api_key="{raw}")' in page
    assert f'anthropic.Anthropic(base_url="http://localhost:8000", api_key="{raw}")' in page
    assert "export OPENAI_BASE_URL=http://localhost:8000/v1" in page
    assert f"export OPENAI_API_KEY={raw}" in page
