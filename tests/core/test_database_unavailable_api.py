"""The database down or restarting under the REST API: 503 with Retry-After in the API's error shape, not
Django's HTML 500 page; an unexpected error under /api/ is a JSON 500."""

from unittest import mock

import pytest
from django.db import OperationalError
from django.test import Client
from django.urls import get_resolver

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _views_imported():
    """The URL configuration, and with it every API module, is imported before a patch: a module first imported
    while `trajectory_list` is patched would keep the mock it bound by name for the rest of the session."""
    get_resolver().url_patterns  # noqa: B018


def _refused(*args, **kwargs):
    raise OperationalError("the database system is shutting down")


def test_a_database_outage_answers_503_with_retry_after(api_client):
    client = api_client(["trajectories:read"])
    with mock.patch("apps.trajectories.selectors.trajectory_list", side_effect=_refused):
        response = client.get("/api/v1/trajectories/")
    assert response.status_code == 503
    assert response["Retry-After"] == "2"
    assert response.json()["error"] == {
        "code": "database_unavailable",
        "type": "api_error",
        "message": "the database is unavailable; retry shortly",
    }
    assert client.get("/api/v1/trajectories/").status_code == 200


def test_an_unexpected_error_under_the_api_is_json(api_client):
    client = Client(raise_request_exception=False)
    raw = api_client(["trajectories:read"]).raw_key
    with mock.patch("apps.trajectories.selectors.trajectory_list", side_effect=RuntimeError("boom")):
        response = client.get("/api/v1/trajectories/", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "internal_error"
    assert "boom" not in response.content.decode()
