"""Publication through the REST API: the embedded server's admin API refuses calls without the installation's
admin token, publication sends it; a backend whose address is not allowed is refused before any connection;
no redirect is followed."""

import httpx
import pytest
from django.conf import settings as django_settings

from apps.inference.models import BackendKind, BackendState
from tests.inference.factories import BackendFactory
from tests.network import EMBEDDED_ALLOWED_HOSTS, listener, scripted_http_server
from tests.servers import inference_server
from tests.training.helpers import MODEL, base_version

pytestmark = pytest.mark.django_db


def publish(api_client, version):
    response = api_client(["admin"]).post(f"/api/v1/model-versions/{version.pk}/publish/")
    assert response.status_code == 200, response.content
    return response.json()["backends"]


def test_publication_sends_the_admin_token_the_embedded_server_requires(
    api_client, tenant, default_model_dir, tmp_path
):
    base = base_version(tenant, default_model_dir)
    with inference_server(
        default_model_dir, served_model=MODEL, version="7", log_path=tmp_path / "inf.log"
    ) as url:
        assert (
            httpx.post(f"{url}/admin/load", json={"path": str(default_model_dir), "version": 3}).status_code
            == 401
        )
        assert httpx.get(f"{url}/admin/version", headers={"Authorization": "Bearer guess"}).status_code == 401
        backend = BackendFactory(
            tenant=tenant,
            name="embedded",
            base_url=url,
            kind=BackendKind.EMBEDDED,
            served_model=MODEL,
            model_version="7",
            state=BackendState.UP,
        )
        outcomes = publish(api_client, base)
        assert [outcome["ok"] for outcome in outcomes] == [True], outcomes
        token = {"Authorization": f"Bearer {django_settings.AREAL_INFERENCE_ADMIN_TOKEN}"}
        assert httpx.get(f"{url}/admin/version", headers=token).json()["version"] == base.number
    backend.refresh_from_db()
    assert backend.model_version == str(base.number)


def test_publication_to_a_disallowed_address_is_refused_before_connecting(
    api_client, tenant, default_model_dir, settings
):
    settings.AREAL_BACKEND_ALLOWED_HOSTS = list(EMBEDDED_ALLOWED_HOSTS)
    base = base_version(tenant, default_model_dir)
    with listener() as port:
        for kind in (BackendKind.EMBEDDED, BackendKind.VLLM):
            BackendFactory(
                tenant=tenant, name=f"old-{kind}", base_url=port.url, kind=kind, served_model=MODEL
            )
        outcomes = publish(api_client, base)
        assert [outcome["ok"] for outcome in outcomes] == [False, False]
        assert all("not allowed" in outcome["error"] for outcome in outcomes)
        assert not port.connected()


def test_publication_follows_no_redirect(api_client, tenant, default_model_dir):
    base = base_version(tenant, default_model_dir)
    with (
        scripted_http_server({("POST", "/admin/load"): (200, {}, {"ok": True})}) as (target, target_hits),
        scripted_http_server({("POST", "/admin/load"): (307, {"Location": f"{target}/admin/load"}, b"")}) as (
            url,
            _,
        ),
    ):
        BackendFactory(
            tenant=tenant, name="redirecting", base_url=url, kind=BackendKind.EMBEDDED, served_model=MODEL
        )
        outcomes = publish(api_client, base)
    assert [outcome["ok"] for outcome in outcomes] == [False]
    assert target_hits == []


def test_publication_to_vllm_sends_its_pause_query_through_the_checked_transport(
    api_client, tenant, default_model_dir
):
    """vLLM's full-weight publication pauses with `/pause?mode=wait&clear_cache=true`: the egress check
    reads the request's address, not its query (a query in a registered base URL is still refused)."""
    base = base_version(tenant, default_model_dir)
    routes = {
        ("POST", "/pause?mode=wait&clear_cache=true"): (200, {}, {}),
        ("POST", "/collective_rpc"): (200, {}, {"results": [None]}),
        ("POST", "/update_weight_version"): (200, {}, {}),
        ("POST", "/resume"): (200, {}, {}),
    }
    with scripted_http_server(routes) as (url, received):
        backend = BackendFactory(
            tenant=tenant,
            name="vllm",
            base_url=url,
            kind=BackendKind.VLLM,
            served_model=MODEL,
            model_version="7",
        )
        outcomes = publish(api_client, base)
    assert [(outcome["ok"], outcome["error"]) for outcome in outcomes] == [(True, "")]
    assert received == list(routes)
    backend.refresh_from_db()
    assert backend.model_version == str(base.number)


def test_publication_records_each_swap_for_the_gateways_and_takes_a_failed_one_back(
    api_client, tenant, default_model_dir
):
    """Gateways stamp vLLM's tokens from the swaps publication records (apps/inference/served.py): the pause
    and resume moments of one that worked; nothing left pending by one whose load failed."""
    from apps.inference.served import served_versions_read

    base = base_version(tenant, default_model_dir)
    routes = {
        ("POST", "/pause?mode=wait&clear_cache=true"): (200, {}, {}),
        ("POST", "/collective_rpc"): (500, {}, {"error": "no such file"}),
        ("POST", "/update_weight_version"): (200, {}, {}),
        ("POST", "/resume"): (200, {}, {}),
    }
    with scripted_http_server(routes) as (url, received):
        backend = BackendFactory(
            tenant=tenant,
            name="vllm",
            base_url=url,
            kind=BackendKind.VLLM,
            served_model=MODEL,
            model_version="7",
        )
        failed = publish(api_client, base)
        assert [outcome["ok"] for outcome in failed] == [False]
        assert received[-1] == ("POST", "/resume")
        assert served_versions_read(backend_ids=[backend.pk]) == {}
        routes[("POST", "/collective_rpc")] = (200, {}, {"results": [None]})
        assert [outcome["ok"] for outcome in publish(api_client, base)] == [True]
    (swap,) = served_versions_read(backend_ids=[backend.pk])[backend.pk].swaps
    assert (swap.from_version, swap.to_version) == ("7", str(base.number))
    assert swap.paused_at <= swap.resumed_at
