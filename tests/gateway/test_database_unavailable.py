"""The database down or restarting (bench/reliability/faults.py measured 500s during a PostgreSQL restart):
the gateway answers 503 with Retry-After in the client's error shape, and answers normally once it is back."""

from unittest import mock

import httpx
import pytest
from django.db import OperationalError

from tests.gateway.conftest import MODEL

pytestmark = pytest.mark.django_db(transaction=True)


def _refused(*args, **kwargs):
    raise OperationalError(
        'connection to server at "127.0.0.1", port 5432 failed: the database system is shutting down'
    )


@pytest.mark.parametrize(
    ("path", "body", "anthropic"),
    [
        (
            "/v1/chat/completions",
            {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]},
            False,
        ),
        (
            "/v1/messages",
            {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]},
            True,
        ),
    ],
)
def test_a_database_outage_answers_503_with_retry_after_then_recovers(
    gateway, backend, agent_key, path, body, anthropic
):
    url, _ = gateway
    headers = {"Authorization": f"Bearer {agent_key('inference')}"}
    with mock.patch("apps.gateway.principals.api_key_authenticate", side_effect=_refused):
        response = httpx.post(url + path, json=body, headers=headers, timeout=30)
    assert response.status_code == 503
    assert response.headers["retry-after"] == "2"
    error = response.json()
    if anthropic:
        assert (error["type"], error["error"]["type"]) == ("error", "overloaded_error")
    else:
        assert error["error"]["code"] == "database_unavailable"
    assert "5432" not in response.text  # no connection details for the client

    assert httpx.post(url + path, json=body, headers=headers, timeout=60).status_code == 200
