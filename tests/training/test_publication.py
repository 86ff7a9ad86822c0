"""Publication through the REST API: the embedded server's admin API refuses calls without its own admin token
(another server's included), publication sends it; a server that also serves another tenant takes no weights; a
backend whose address is not allowed is refused before any connection; no redirect is followed."""

import httpx
import pytest

from apps.audit.models import AuditEvent
from apps.inference.admin_tokens import inference_admin_token
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
        token = {"Authorization": f"Bearer {inference_admin_token(url)}"}
        assert httpx.get(f"{url}/admin/version", headers=token).json()["version"] == base.number
    backend.refresh_from_db()
    assert backend.model_version == str(base.number)


def test_each_embedded_server_takes_only_its_own_admin_token(api_client, tenant, default_model_dir, tmp_path):
    """One installation token no longer opens every server: another server's token is refused; publication
    sends the server's own."""
    base = base_version(tenant, default_model_dir)
    with inference_server(
        default_model_dir, served_model=MODEL, version="7", log_path=tmp_path / "inf.log"
    ) as url:
        port = int(url.rsplit(":", 1)[1])
        for other in (f"http://127.0.0.1:{port + 1}", "http://127.0.0.1:8100", f"http://localhost:{port}"):
            wrong = {"Authorization": f"Bearer {inference_admin_token(other)}"}
            load = {"path": str(default_model_dir), "version": 3}
            assert httpx.post(f"{url}/admin/load", json=load, headers=wrong).status_code == 401
        own = {"Authorization": f"Bearer {inference_admin_token(url)}"}
        assert httpx.get(f"{url}/admin/version", headers=own).json()["version"] == 7
        BackendFactory(tenant=tenant, name="embedded", base_url=url, served_model=MODEL, model_version="7")
        assert [outcome["ok"] for outcome in publish(api_client, base)] == [True]
        assert httpx.get(f"{url}/admin/version", headers=own).json()["version"] == base.number


def test_a_server_that_serves_two_tenants_takes_no_weights(
    api_client, tenant, other_tenant, default_model_dir, tmp_path
):
    """Tenant A's backend on the server B's backend uses (a row older than the grants): A's publication is
    refused, audited, and the server keeps B's weights and version."""
    base = base_version(tenant, default_model_dir)
    with inference_server(
        default_model_dir, served_model=MODEL, version="7", log_path=tmp_path / "inf.log"
    ) as url:
        theirs = BackendFactory(
            tenant=other_tenant, name="embedded", base_url=url, served_model=MODEL, model_version="7"
        )
        ours = BackendFactory(
            tenant=tenant,
            name="borrowed",
            base_url=url.replace("127.0.0.1", "localhost"),
            served_model=MODEL,
            model_version="7",
        )
        (outcome,) = publish(api_client, base)
        assert outcome["ok"] is False
        assert "also serves another tenant" in outcome["error"]
        assert other_tenant.slug not in outcome["error"]
        own = {"Authorization": f"Bearer {inference_admin_token(url)}"}
        assert httpx.get(f"{url}/admin/version", headers=own).json()["version"] == 7
    ours.refresh_from_db()
    theirs.refresh_from_db()
    assert (ours.model_version, ours.state, theirs.model_version) == ("7", BackendState.UP, "7")
    refused = AuditEvent.objects.get(tenant=tenant, verb="model_version.publish_refused")
    assert refused.data == {"backend": "borrowed", "reason": "shared_server"}


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
