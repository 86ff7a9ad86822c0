"""A server error under the embedded default (areal_web/settings/local.py: DEBUG on) shows a signed-in member
the plain 500 page, not Django's debug page with its traceback, paths and settings; the debug page only when
the operator set DJANGO_DEBUG (issue 26, Low)."""

import importlib
import logging

import pytest
from django.conf import settings as django_settings
from django.test import Client, override_settings

from tests.console.error_urls import MARKER

pytestmark = pytest.mark.django_db

DEBUG_PAGE_SIGNS = ("Traceback", "Request information", "INSTALLED_APPS", "DJANGO_SETTINGS_MODULE", __file__)


def _local_settings(monkeypatch, debug_variable):
    """The local settings as the environment makes them: DJANGO_DEBUG unset (the default) or set."""
    if debug_variable is None:
        monkeypatch.delenv("DJANGO_DEBUG", raising=False)
    else:
        monkeypatch.setenv("DJANGO_DEBUG", debug_variable)
    from areal_web.settings import local

    local = importlib.reload(local)
    return {
        "DEBUG": local.DEBUG,
        "AREAL_DEBUG_ERROR_PAGE": local.AREAL_DEBUG_ERROR_PAGE,
        "MIDDLEWARE": [*local.MIDDLEWARE, "tests.console.error_urls.FailingMiddleware"],
        "ROOT_URLCONF": "tests.console.error_urls",
    }


def _member_client(member, role):
    client = Client(raise_request_exception=False)
    client.force_login(member(role))
    return client


@pytest.mark.parametrize("role", ["viewer", "admin"])
@pytest.mark.parametrize("path", ["/fails/", "/middleware-fails/"])
def test_the_default_shows_members_the_plain_error_page(member, tenant, monkeypatch, caplog, role, path):
    local = _local_settings(monkeypatch, None)
    assert local["DEBUG"] is True  # the embedded default runs with DEBUG on
    with override_settings(**local), caplog.at_level(logging.ERROR, logger="django.request"):
        response = _member_client(member, role).get(path, HTTP_ACCEPT="text/html")
    assert response.status_code == 500
    page = response.content.decode()
    assert 'id="server-error"' in page
    for sign in (*DEBUG_PAGE_SIGNS, MARKER, str(django_settings.BASE_DIR)):
        assert sign not in page, sign
    assert any(MARKER in str(record.exc_info[1]) for record in caplog.records if record.exc_info)  # logged


def test_the_default_answers_the_apis_json_error_under_api(member, tenant, monkeypatch):
    with override_settings(**_local_settings(monkeypatch, None)):
        response = _member_client(member, "viewer").get("/api/v1/fails/")
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "internal_error"
    assert MARKER not in response.content.decode()


def test_a_member_still_gets_the_not_found_answer(member, tenant, monkeypatch):
    with override_settings(**_local_settings(monkeypatch, None)):
        response = _member_client(member, "viewer").get("/api/v1/no-such-endpoint/")
    assert response.status_code == 404


@pytest.mark.parametrize("value", ["1", "true"])
def test_the_debug_page_when_the_operator_asked_for_it(member, tenant, monkeypatch, value):
    local = _local_settings(monkeypatch, value)
    assert (local["DEBUG"], local["AREAL_DEBUG_ERROR_PAGE"]) == (True, True)
    with override_settings(**local):
        response = _member_client(member, "admin").get("/fails/", HTTP_ACCEPT="text/html")
    assert response.status_code == 500
    assert "Traceback" in response.content.decode()
    assert MARKER in response.content.decode()


def test_debug_off_is_off(monkeypatch):
    local = _local_settings(monkeypatch, "0")
    assert (local["DEBUG"], local["AREAL_DEBUG_ERROR_PAGE"]) == (False, False)
