"""A tenant admin in a real headless Chromium: signs in, creates an API key, sees it once, revokes it."""

import re

import pytest
from rest_framework.test import APIClient

from tests.browser_support import browser, page  # noqa: F401  (fixtures)
from tests.tenants.factories import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _status_with(raw_key: str) -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
    return client.get("/api/v1/tenants/").status_code


def test_admin_creates_sees_once_and_revokes_a_key(live_server, page, admin_user, tenant):  # noqa: F811
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", admin_user.username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    assert page.locator("h1").inner_text() == "Acme"

    page.click("nav.mainnav >> text=API keys")
    page.fill("#create-key input[name=name]", "browser-agent")
    page.check("#create-key input[value=inference]")
    page.click("#create-key button[type=submit]")
    raw_key = page.locator("#new-key").inner_text().strip()
    assert re.fullmatch(r"ak-[A-Za-z0-9_-]{40,}", raw_key)
    assert "shown only this once" in page.content()
    page.shoot("key-created")
    assert _status_with(raw_key) == 200

    page.click("text=Back to API keys")
    assert raw_key not in page.content(), "the secret must never be shown again"
    row = page.locator(f"tr[data-prefix='{raw_key[:12]}']")
    assert row.locator(".status").inner_text() == "active"

    page.once("dialog", lambda dialog: dialog.accept())
    row.locator("button.danger").click()
    page.wait_for_selector(".message")
    assert "Revoked" in page.locator(".message").inner_text()
    assert page.locator(f"tr[data-prefix='{raw_key[:12]}'] .status").inner_text() == "revoked"
    page.shoot("key-revoked")
    assert _status_with(raw_key) == 401
    assert page.javascript_errors == []


def test_wrong_password_shows_an_error(live_server, page, admin_user):  # noqa: F811
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", admin_user.username)
    page.fill("#id_password", "not the password")
    page.click("button[type=submit]")
    assert "correct username and password" in page.locator("[role=alert]").inner_text()
    assert page.javascript_errors == []
