"""Backend URLs are tenant input: refused (before any connection) when they carry a query, fragment or userinfo,
or when an address they resolve to is not allowed by AREAL_BACKEND_ALLOWED_HOSTS; probes follow no redirects
and show tenants generic errors. Through the REST API, the console form, the registerbackend command and the
check endpoint. No test here sends a packet off this machine (tests/network.py refuses that itself)."""

import socket
import time
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from apps.inference.models import BackendKind, BackendState, InferenceBackend
from tests.inference.factories import BackendFactory
from tests.network import EMBEDDED_ALLOWED_HOSTS, connections_recorded, listener, scripted_http_server

pytestmark = pytest.mark.django_db

BODY = {"name": "replica", "kind": "embedded", "served_model": "policy-small"}
REFUSED_URLS = [
    "http://127.0.0.1:6379",  # Redis on loopback
    "http://127.0.0.1:5432",  # PostgreSQL on loopback
    "http://localhost:6379",
    "http://[::1]:5432",
    "http://[::ffff:127.0.0.1]:6379",  # loopback written as an IPv4-mapped IPv6 address
    "http://2130706433:6379",  # loopback written as one decimal number
    "http://0.0.0.0:8100",
    "http://10.0.0.5:8100",
    "http://172.16.3.4:8100",
    "http://192.168.1.20:8100",
    "http://100.64.0.1:8100",  # carrier-grade NAT
    "http://169.254.169.254/latest/meta-data",  # a cloud's metadata service
    "http://[fe80::1]:8100",
    "http://[fd00::5]:8100",
    "http://127.0.0.1:8100/?next=x",  # allowed address, but a query
    "http://127.0.0.1:8100/#fragment",
    "http://user:secret@127.0.0.1:8100",
    "http://@127.0.0.1:8100",
]


@pytest.fixture
def embedded_allow_list(settings):
    settings.AREAL_BACKEND_ALLOWED_HOSTS = list(EMBEDDED_ALLOWED_HOSTS)
    return settings


@pytest.fixture
def fake_dns(monkeypatch):
    """fake_dns({name: [addresses]}): getaddrinfo answers those names from the table (no lookup leaves the
    machine) and every other name as before."""
    real = socket.getaddrinfo

    def install(table: dict):
        def getaddrinfo(host, port, *args, **kwargs):
            name = host.decode() if isinstance(host, bytes) else host
            if name in table:
                return [
                    (
                        socket.AF_INET6 if ":" in address else socket.AF_INET,
                        socket.SOCK_STREAM,
                        6,
                        "",
                        (address, int(port or 0)) if ":" not in address else (address, int(port or 0), 0, 0),
                    )
                    for address in table[name]
                ]
            return real(host, port, *args, **kwargs)

        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)

    return install


def off_machine(attempts) -> list:
    return [address for address in attempts if not address[0].startswith(("127.", "::1"))]


@pytest.mark.parametrize("url", REFUSED_URLS)
def test_rest_registration_refuses_urls_outside_the_allow_list_without_connecting(
    api_client, embedded_allow_list, url
):
    with connections_recorded() as attempts:
        response = api_client(["admin"]).post("/api/v1/backends/", {**BODY, "base_url": url}, format="json")
    assert response.status_code == 400, response.json()
    assert list(response.json()["error"]["fields"]) == [
        "base_url"
    ]  # not_allowed, or the URL field's own refusal
    assert not InferenceBackend.objects.exists()
    assert off_machine(attempts) == []


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8100", "http://localhost:8101/", "http://[::1]:8100", "http://127.0.0.1:8100/openai"],
)
def test_rest_registration_accepts_listed_addresses(api_client, embedded_allow_list, url):
    response = api_client(["admin"]).post("/api/v1/backends/", {**BODY, "base_url": url}, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["base_url"] == url.rstrip("/")


def test_rest_update_refuses_a_disallowed_url_and_keeps_the_old_one(api_client, tenant, embedded_allow_list):
    backend = BackendFactory(tenant=tenant, base_url="http://127.0.0.1:8100")
    client = api_client(["admin"])
    for url in ("http://127.0.0.1:6379", "http://10.1.2.3:8100", "http://127.0.0.1:8100?x=1"):
        response = client.patch(f"/api/v1/backends/{backend.pk}/", {"base_url": url}, format="json")
        assert response.status_code == 400
        assert response.json()["error"]["fields"] == {"base_url": ["not_allowed"]}
    backend.refresh_from_db()
    assert backend.base_url == "http://127.0.0.1:8100"


def test_every_address_a_name_resolves_to_is_checked(api_client, embedded_allow_list, fake_dns):
    fake_dns(
        {
            "private.example": ["10.9.8.7"],
            "mixed.example": ["8.8.8.8", "192.168.0.10"],
            "public.example": ["8.8.8.8", "2001:4860:4860::8888"],
        }
    )
    client = api_client(["admin"])
    with connections_recorded() as attempts:
        for name in ("private.example", "mixed.example"):
            response = client.post(
                "/api/v1/backends/",
                {**BODY, "name": name.split(".")[0], "base_url": f"http://{name}:8100"},
                format="json",
            )
            assert response.status_code == 400, name
            assert "10.9.8.7" not in response.json()["error"]["message"]  # the resolved address is not shown
        allowed = client.post(
            "/api/v1/backends/", {**BODY, "base_url": "https://public.example"}, format="json"
        )
    assert allowed.status_code == 201
    assert off_machine(attempts) == []


def test_an_operator_listed_name_may_resolve_to_a_private_address(api_client, tenant, settings, fake_dns):
    """... once the operator granted it to the tenant (apps/inference/grants.py)."""
    settings.AREAL_BACKEND_ALLOWED_HOSTS = ["inference.internal:8100", "10.0.0.0/8:9000"]
    settings.AREAL_BACKEND_GRANTS = []
    fake_dns({"inference.internal": ["10.0.0.9"]})
    client = api_client(["admin"])
    ungranted = client.post(
        "/api/v1/backends/", {**BODY, "base_url": "http://inference.internal:8100"}, format="json"
    )
    assert ungranted.status_code == 400
    assert ungranted.json()["error"]["fields"] == {"base_url": ["not_granted"]}
    for pattern in ("inference.internal:8100", "10.0.0.0/8:9000"):
        call_command("backendgrant", tenant.slug, pattern, stdout=StringIO())
    assert (
        client.post(
            "/api/v1/backends/", {**BODY, "base_url": "http://inference.internal:8100"}, format="json"
        ).status_code
        == 201
    )
    assert (
        client.post(
            "/api/v1/backends/", {**BODY, "name": "b", "base_url": "http://10.20.30.40:9000"}, format="json"
        ).status_code
        == 201
    )
    for url in ("http://inference.internal:8101", "http://10.20.30.40:9001", "http://8.8.8.8:9000"):
        response = client.post("/api/v1/backends/", {**BODY, "name": "c", "base_url": url}, format="json")
        assert response.status_code == 400, url  # `public` is not listed here


def test_registerbackend_command_refuses_a_disallowed_url(tenant, embedded_allow_list):
    with connections_recorded() as attempts, pytest.raises(CommandError, match="not allowed"):
        call_command(
            "registerbackend",
            "acme",
            "--name",
            "local",
            "--url",
            "http://10.0.0.5:8100",
            "--kind",
            "vllm",
            "--model",
            "m",
            stdout=StringIO(),
        )
    with pytest.raises(CommandError, match="not allowed"):
        call_command(
            "registerbackend",
            "acme",
            "--name",
            "local",
            "--url",
            "http://127.0.0.1:6379",
            "--kind",
            "vllm",
            "--model",
            "m",
            stdout=StringIO(),
        )
    assert not InferenceBackend.objects.exists()
    assert off_machine(attempts) == []


def test_console_form_refuses_a_disallowed_url(admin_user, embedded_allow_list):
    client = Client()
    client.force_login(admin_user)
    with connections_recorded() as attempts:
        response = client.post("/backends/", {**BODY, "base_url": "http://169.254.169.254/", "weight": 1})
    assert response.status_code == 422
    assert "not allowed" in response.content.decode()
    assert not InferenceBackend.objects.exists()
    assert off_machine(attempts) == []


def test_a_row_registered_before_the_fix_is_refused_at_check_time_without_connecting(
    api_client, tenant, embedded_allow_list
):
    with listener() as port:
        local = BackendFactory(tenant=tenant, name="old-local", base_url=port.url, state=BackendState.UP)
        private = BackendFactory(
            tenant=tenant, name="old-private", base_url="http://10.0.0.5:8100", state=BackendState.UP
        )
        client = api_client(["admin"])
        with connections_recorded() as attempts:
            for backend in (local, private):
                body = client.post(f"/api/v1/backends/{backend.pk}/check/").json()
                assert body["state"] == "down"
                assert "not allowed" in body["last_error"]
        assert not port.connected()
    assert off_machine(attempts) == []


def test_probe_errors_shown_to_tenants_are_generic(api_client, tenant):
    """A closed port, a port that never answers and a server answering 500 with a banner look alike."""
    client = api_client(["admin"])
    errors = []
    with (
        listener() as silent,
        listener() as closed_later,
        scripted_http_server({("GET", "/health"): (500, {"Server": "Redis 7.2"}, b"-ERR banner")}) as (
            url,
            _,
        ),
    ):
        closed_url = closed_later.url
        closed_later.close()
        for base_url in (closed_url, silent.url, url):
            backend = BackendFactory(tenant=tenant, base_url=base_url, state=BackendState.UP)
            body = client.post(f"/api/v1/backends/{backend.pk}/check/").json()
            assert body["state"] == "down"
            errors.append(body["last_error"])
    assert len(set(errors)) == 1, errors
    for word in ("ConnectError", "Timeout", "refused", "500", "Redis", "banner"):
        assert word.lower() not in errors[0].lower()


def test_probes_follow_no_redirect(api_client, tenant):
    with (
        scripted_http_server({("GET", "/health"): (200, {}, {"status": "ok"})}) as (target, target_hits),
        scripted_http_server({("GET", "/health"): (302, {"Location": f"{target}/health"}, b"")}) as (url, _),
    ):
        backend = BackendFactory(tenant=tenant, base_url=url, state=BackendState.UP)
        body = api_client(["admin"]).post(f"/api/v1/backends/{backend.pk}/check/").json()
    assert body["state"] == "down"
    assert target_hits == []


def test_a_check_records_the_version_the_server_reports(api_client, tenant):
    routes = {
        ("GET", "/health"): (200, {}, {"status": "ok", "policy_version": 3}),
        ("GET", "/weight_info"): (200, {}, {"weight_version": "v7"}),
    }
    with scripted_http_server(routes) as (url, _):
        embedded = BackendFactory(tenant=tenant, name="e", base_url=url, model_version="")
        vllm = BackendFactory(tenant=tenant, name="v", base_url=url, kind=BackendKind.VLLM, model_version="")
        client = api_client(["admin"])
        assert client.post(f"/api/v1/backends/{embedded.pk}/check/").json()["reported_version"] == "3"
        assert client.post(f"/api/v1/backends/{vllm.pk}/check/").json()["reported_version"] == "v7"


def test_the_check_of_a_silent_backend_takes_the_probe_timeout_not_longer(api_client, tenant):
    with listener() as silent:
        backend = BackendFactory(
            tenant=tenant, base_url=silent.url, kind=BackendKind.VLLM, state=BackendState.UP
        )
        started = time.monotonic()
        api_client(["admin"]).post(f"/api/v1/backends/{backend.pk}/check/")
    assert time.monotonic() - started < 8


def test_only_operator_listed_addresses_count_as_listed_for_the_admin_token(settings, fake_dns):
    """Publication sends the admin token only where an operator's entry, not `public`, allowed the address."""
    from apps.inference.egress import backend_url_check

    settings.AREAL_BACKEND_ALLOWED_HOSTS = ["127.0.0.1:8100", "public"]
    fake_dns({"tenant-server.example": ["8.8.4.4"]})
    with connections_recorded() as attempts:
        assert backend_url_check("http://127.0.0.1:8100").operator_listed
        assert not backend_url_check("http://tenant-server.example:8100").operator_listed
    assert attempts == []


def test_the_stack_lists_its_own_inference_ports_and_gives_each_server_its_own_token(settings):
    from apps.inference.admin_tokens import inference_admin_token
    from areal_web.processes import inference_server_environment, stack_environment

    settings.AREAL_BACKEND_ALLOWED_HOSTS = list(EMBEDDED_ALLOWED_HOSTS)
    environment = stack_environment({}, host="127.0.0.1", inference_ports=[8100, 9555])
    assert "AREAL_INFERENCE_ADMIN_TOKEN" not in environment  # not in the web's and workers' environment
    assert environment["AREAL_BACKEND_ALLOWED_HOSTS"].split(",") == [
        *EMBEDDED_ALLOWED_HOSTS,
        "127.0.0.1:9555",
    ]
    tokens = [
        inference_server_environment(environment, url=f"http://127.0.0.1:{port}")[
            "AREAL_INFERENCE_ADMIN_TOKEN"
        ]
        for port in (8100, 8101)
    ]
    assert tokens == [
        inference_admin_token("http://127.0.0.1:8100"),
        inference_admin_token("http://127.0.0.1:8101"),
    ]
    assert tokens[0] != tokens[1]
    assert min(len(token) for token in tokens) >= 32
