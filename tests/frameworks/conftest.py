"""The framework tier (`make test-frameworks`, in .venv-frameworks): real agent frameworks, pinned, pointed at
the real gateway on the embedded server with only their base URL and key.

Nothing leaves this machine: the frameworks' tracing and telemetry are off by their own documented switches,
set here before any of them is imported, and every connection this process attempts is checked before it is
made (tests/network.py refuses any that is not to loopback); a test fails if anything tried one."""

import importlib.util
import ipaddress
import os

# The OpenAI Agents SDK's trace exporter (it would upload to OpenAI with the client's key), LangSmith tracing
# for LangChain and LangGraph, OpenTelemetry's SDK (Pydantic AI's and smolagents' optional instrumentation
# export through it), the Hugging Face Hub that smolagents imports (telemetry, and no Hub lookups at all), and
# the common do-not-track switch. No credential of a real provider is visible to the frameworks.
os.environ.update(
    {
        "OPENAI_AGENTS_DISABLE_TRACING": "1",
        "LANGSMITH_TRACING": "false",
        "LANGCHAIN_TRACING_V2": "false",
        "OTEL_SDK_DISABLED": "true",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_OFFLINE": "1",
        "DO_NOT_TRACK": "1",
    }
)
for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "LANGSMITH_API_KEY", "LANGCHAIN_API_KEY", "HF_TOKEN"):
    os.environ.pop(name, None)

import pytest  # noqa: E402

from tests.frameworks import scenarios  # noqa: E402
from tests.frameworks.capture import capture_server  # noqa: E402
from tests.gateway.conftest import agent_key, gateway  # noqa: E402, F401  (fixtures)
from tests.network import connections_recorded  # noqa: E402
from tests.servers import inference_server  # noqa: E402
from tests.workers.inference.conftest import default_model_dir  # noqa: E402, F401  (fixture)

FRAMEWORKS = ("agents", "langchain_openai", "langgraph", "pydantic_ai", "smolagents", "areal")


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture(scope="session", autouse=True)
def connections_attempted():
    """Every (host, port) this process tried to connect to during the session; any off this machine was
    refused before it was made."""
    with connections_recorded() as attempts:
        yield attempts


@pytest.fixture(autouse=True)
def nothing_tried_to_leave(connections_attempted):
    first = len(connections_attempted)
    yield
    leaving = [address for address in connections_attempted[first:] if not _loopback(address[0])]
    assert not leaving, f"connections off this machine were attempted (and refused): {leaving}"


@pytest.fixture(scope="session", autouse=True)
def frameworks_quiet():
    """What the frameworks offer in code besides their environment switches. Outside .venv-frameworks (the
    project's .venv lacks most frameworks) the tier's tests are skipped."""
    missing = [name for name in FRAMEWORKS if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"the framework tier runs in .venv-frameworks (make test-frameworks); missing {missing}")
    import agents
    from pydantic_ai import Agent

    agents.set_tracing_disabled(True)
    Agent.instrument_all(False)


@pytest.fixture(scope="session")
def framework_model_dir(default_model_dir, tmp_path_factory, frameworks_quiet):  # noqa: F811
    """The model taught what every scenario sends (framework_model.py), from a run of every scenario
    against the capture (capture.py)."""
    from tests.frameworks.framework_model import make_framework_model

    with capture_server() as (url, exchanges):
        for scenario in scenarios.CAPTURED:
            scenario(url, "capture-key")
        captured = list(exchanges)
    return make_framework_model(default_model_dir, tmp_path_factory.mktemp("models") / "frameworks", captured)


@pytest.fixture(scope="session")
def framework_backend_url(framework_model_dir, tmp_path_factory):
    with inference_server(
        framework_model_dir,
        served_model=scenarios.MODEL,
        log_path=tmp_path_factory.mktemp("logs") / "frameworks-inference.log",
    ) as url:
        yield url


@pytest.fixture
def framework_backend(tenant, framework_backend_url):
    """The embedded server as the tenant's backend, with PII redaction off: the tests read the recorded
    token data of the answers, which redaction would drop where sampled text looks like PII."""
    from apps.inference.models import BackendKind, BackendState
    from apps.tenants.models import PiiMode, TenantPolicy
    from tests.inference.factories import BackendFactory

    TenantPolicy.objects.update_or_create(tenant=tenant, defaults={"pii_mode": PiiMode.OFF})
    return BackendFactory(
        tenant=tenant,
        name="embedded",
        base_url=framework_backend_url,
        kind=BackendKind.EMBEDDED,
        served_model=scenarios.MODEL,
        model_version="1",
        state=BackendState.UP,
    )


@pytest.fixture
def serving(gateway, framework_backend, agent_key):  # noqa: F811
    """(gateway base URL, the gateway, an agent key of the tenant)."""
    url, running = gateway
    return url, running, agent_key("inference")
