import pytest

from apps.audit.services import Actor
from apps.inference.models import BackendKind, BackendState
from apps.tenants.models import PiiMode, TenantPolicy
from apps.tenants.services import api_key_create
from tests.inference.factories import BackendFactory
from tests.servers import inference_server, web_server_in_thread
from tests.workers.inference.conftest import default_model_dir, tool_model_dir  # noqa: F401  (fixtures)

MODEL = "policy-small"


@pytest.fixture(scope="session")
def embedded_backend_url(default_model_dir, tmp_path_factory):  # noqa: F811
    with inference_server(
        default_model_dir, log_path=tmp_path_factory.mktemp("logs") / "inference.log"
    ) as url:
        yield url


@pytest.fixture(scope="session")
def tool_backend_url(tool_model_dir, tmp_path_factory):  # noqa: F811
    with inference_server(
        tool_model_dir,
        served_model="tool-model",
        log_path=tmp_path_factory.mktemp("logs") / "tool-inference.log",
    ) as url:
        yield url


@pytest.fixture
def gateway(transactional_db):
    """(base URL, Gateway) of the real ASGI application served by uvicorn; flush() drains the journal."""
    from apps.gateway.fresh_session_routing import candidates_clear
    from apps.gateway.policy import snapshots_clear
    from apps.gateway.principals import memo_clear
    from apps.gateway.providers import profiles_clear

    snapshots_clear()
    memo_clear()
    candidates_clear()
    profiles_clear()
    with web_server_in_thread() as (url, gateway):
        gateway.served_versions.clear()  # the application (and its snapshot) lives as long as the process
        yield url, gateway


@pytest.fixture
def gateway_url(gateway):
    """The base URL of the served application (the `gateway` fixture's)."""
    return gateway[0]


@pytest.fixture
def backend(tenant, embedded_backend_url):
    return BackendFactory(
        tenant=tenant,
        name="embedded",
        base_url=embedded_backend_url,
        kind=BackendKind.EMBEDDED,
        served_model=MODEL,
        model_version="1",
        state=BackendState.UP,
    )


@pytest.fixture
def agent_key(tenant):
    """key(*scopes, of=tenant) → a raw API key."""

    def make(*scopes, of=None):
        _, raw = api_key_create(
            tenant=of or tenant,
            actor=Actor.system("test"),
            name=f"agent-{len(scopes)}-{__import__('uuid').uuid4().hex[:6]}",
            scopes=list(scopes or ["inference"]),
        )
        return raw

    return make


@pytest.fixture
def pii_off(tenant):
    """For tests that read the token data of sampled text: a random model's few tokens can read as a phone
    number or an e-mail address, and redaction (the default) then drops the step's ids, as it must."""
    TenantPolicy.objects.update_or_create(tenant=tenant, defaults={"pii_mode": PiiMode.OFF})
