"""The gateway's paths bypass Django's middleware, so they get its edge checks of their own: the Host
header is checked against DJANGO_ALLOWED_HOSTS (plus AREAL_GATEWAY_URL's host, which evaluation workers
call), and answers carry the security headers Django's SecurityMiddleware would add."""

import httpx
import pytest

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_host_not_allowed_is_refused_in_the_clients_error_shape(gateway_url):
    for path, method in (
        ("/v1/models", "GET"),
        ("/v1/chat/completions", "POST"),
        ("/rl/start_session", "POST"),
    ):
        refused = httpx.request(
            method, gateway_url + path, headers={"Host": "attacker.example"}, json={}, timeout=10
        )
        assert refused.status_code == 400, path
        assert refused.json()["error"]["code"] == "invalid_host"


def test_allowed_hosts_reach_the_gateway_with_security_headers(gateway_url, settings):
    settings.AREAL_GATEWAY_URL = "http://web.internal:8000"
    for host in ("localhost", "127.0.0.1", "web.internal:8000"):
        answer = httpx.get(gateway_url + "/v1/models", headers={"Host": host}, timeout=10)
        assert answer.status_code == 401, host
        assert answer.json()["error"]["code"] == "missing_key", host
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["referrer-policy"] == "same-origin"
        assert "strict-transport-security" not in answer.headers  # plain http


def test_hsts_on_requests_that_arrived_over_https(gateway_url, settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.SECURE_HSTS_SECONDS = 3600
    answer = httpx.get(gateway_url + "/v1/models", headers={"X-Forwarded-Proto": "https"}, timeout=10)
    assert answer.headers["strict-transport-security"].startswith("max-age=3600")
