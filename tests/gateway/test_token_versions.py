"""Per-token policy versions behind a backend that reports none (vLLM's answers carry token ids and logprobs
but no versions), seen by an agent through the openai SDK: tokens get the version the backend serves; a
publication (through the REST API) swapping weights in the middle of a stream splits its tokens between the
old and the new version; a whole answer across a swap gets the old version for every token and a warning;
a version that cannot be derived is recorded as -1 with a warning on the step, the trajectory page and the
Prometheus metrics."""

from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
from django.test import Client

from apps.inference.models import BackendKind, BackendState
from apps.tenants.permissions import Role
from apps.trajectories.models import Step
from tests.gateway.anthropic_app import serve_in_thread
from tests.gateway.conftest import MODEL
from tests.gateway.helpers import drain, step_tokens, wait_until_swap_seen
from tests.gateway.versionless_server import VersionlessServer
from tests.inference.factories import BackendFactory
from tests.metrics.exposition import parse
from tests.training.factories import ModelVersionFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("pii_off")]
HELLO = [{"role": "user", "content": "Say hello"}]
WARNINGS = "areal_gateway_token_version_warnings_total"


@pytest.fixture
def server():
    standin = VersionlessServer(tokens=6)
    with serve_in_thread(standin.app) as url:
        standin.url = url
        yield standin
    standin.release()


@pytest.fixture
def fast_refresh(settings):
    settings.AREAL_GATEWAY_SWAP_REFRESH_MS = 20


def vllm_backend(tenant, server, *, version="3"):
    return BackendFactory(
        tenant=tenant,
        name="vllm-standin",
        base_url=server.url,
        kind=BackendKind.VLLM,
        served_model=MODEL,
        model_version=version,
        state=BackendState.UP,
    )


def sdk(url, key):
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=30)


def ask(client, **options):
    return client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=6, **options)


def publish(api_client, tenant, number):
    version = ModelVersionFactory(tenant=tenant, name=MODEL, number=number)
    response = api_client(["admin"]).post(f"/api/v1/model-versions/{version.pk}/publish/")
    assert response.status_code == 200, response.content
    assert [outcome["ok"] for outcome in response.json()["backends"]] == [True], response.json()


def warning_count(client, tenant, reason: str) -> float:
    _, samples = parse(client.get("/metrics").content.decode())
    return samples.get((WARNINGS, frozenset({("tenant_id", str(tenant.pk)), ("reason", reason)})), 0.0)


def test_tokens_get_the_version_the_backend_serves_before_and_after_a_publication(
    gateway, agent_key, tenant, server, api_client, fast_refresh
):
    url, gw = gateway
    backend = vllm_backend(tenant, server)
    client = sdk(url, agent_key("inference"))
    unary = ask(client)
    streamed = [chunk.id for chunk in ask(client, stream=True)]
    publish(api_client, tenant, 4)
    wait_until_swap_seen(gw, backend.pk, "4")
    after = ask(client)
    drain(gw)

    for step_id in (unary.id, streamed[0]):
        step = Step.objects.get(pk=step_id)
        assert step_tokens(step)["completion_versions"] == [3] * 6
        assert step.policy_version == 3
        assert step.state["token_versions"] == {
            "source": "backend",
            "backend": "vllm-standin",
            "version": "3",
        }
    published = Step.objects.get(pk=after.id)
    assert step_tokens(published)["completion_versions"] == [4] * 6
    assert published.policy_version == 4
    assert "warning" not in published.state["token_versions"]
    assert "/pause?mode=wait&clear_cache=true" in server.admin_calls
    assert server.weight_version == "4"


def test_a_swap_in_the_middle_of_a_stream_splits_its_tokens_between_versions(
    gateway, agent_key, tenant, server, api_client, fast_refresh, settings
):
    settings.AREAL_VLLM_PAUSE_MODE = "keep"  # in-flight generation continues on the new weights
    url, gw = gateway
    backend = vllm_backend(tenant, server)
    client = sdk(url, agent_key("inference"))
    ask(client)  # this gateway process now follows the backend's swaps
    server.hold(after=3)
    stream = iter(ask(client, stream=True))
    received = []
    while sum(1 for chunk in received if chunk.choices and chunk.choices[0].delta.content) < 3:
        received.append(next(stream))
    publish(api_client, tenant, 4)
    wait_until_swap_seen(gw, backend.pk, "4")
    server.release()
    received += list(stream)
    drain(gw)

    step = Step.objects.get(pk=received[0].id)
    assert (
        "".join(chunk.choices[0].delta.content or "" for chunk in received if chunk.choices)
        == step.action["text"]
    )
    assert step_tokens(step)["completion_versions"] == [3, 3, 3, 4, 4, 4]
    assert step.policy_version == 4
    note = step.state["token_versions"]
    assert note["split"] == "stream"
    assert (note["swap"]["from"], note["swap"]["to"]) == ("3", "4")
    assert note["swap"]["paused_at"] <= note["swap"]["resumed_at"]
    assert "warning" not in note
    assert any(call.startswith("/pause?mode=keep") for call in server.admin_calls)


def test_a_whole_answer_across_a_swap_gets_the_old_version_and_a_warning(
    gateway, agent_key, tenant, server, api_client, fast_refresh, member, client
):
    url, gw = gateway
    backend = vllm_backend(tenant, server)
    agent = sdk(url, agent_key("inference"))
    ask(agent)
    before = warning_count(client, tenant, "swap_split_unknown")
    server.hold(after=0)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(ask, agent)
        assert server.holding.wait(10)
        publish(api_client, tenant, 4)
        wait_until_swap_seen(gw, backend.pk, "4")
        server.release()
        reply = pending.result(timeout=30)
    drain(gw)

    step = Step.objects.get(pk=reply.id)
    assert step_tokens(step)["completion_versions"] == [3] * 6
    note = step.state["token_versions"]
    assert note["split"] == "unknown"
    assert note["warning"]["code"] == "swap_split_unknown"
    assert "3 → 4" in note["warning"]["message"]
    assert warning_count(client, tenant, "swap_split_unknown") == before + 1
    page = _signed_in(member(Role.VIEWER)).get(f"/trajectories/{step.trajectory_id}/").content.decode()
    assert "weight swap inside the answer" in page
    assert "1 step with a warning" in page


@pytest.mark.parametrize("row_version", ["", "llama-3-8b"], ids=["none", "not-a-number"])
def test_an_unknown_version_is_recorded_as_minus_one_and_warned(
    gateway, agent_key, tenant, server, member, client, row_version
):
    url, gw = gateway
    vllm_backend(tenant, server, version=row_version)  # never checked: no reported version either
    before = warning_count(client, tenant, "unknown_version")
    agent = sdk(url, agent_key("inference"))
    unary = ask(agent)
    streamed = [chunk.id for chunk in ask(agent, stream=True)]
    drain(gw)

    for step_id in (unary.id, streamed[0]):
        step = Step.objects.get(pk=step_id)
        assert step_tokens(step)["completion_versions"] == [-1] * 6
        assert step.policy_version is None
        note = step.state["token_versions"]
        assert note["source"] == "unknown"
        assert note["warning"]["code"] == "unknown_version"
        assert "vllm-standin" in note["warning"]["message"]
    assert warning_count(client, tenant, "unknown_version") == before + 2
    step = Step.objects.get(pk=unary.id)
    page = _signed_in(member(Role.VIEWER)).get(f"/trajectories/{step.trajectory_id}/").content.decode()
    assert "token versions unknown" in page
    assert "recorded as version -1" in page


def test_answers_that_carry_their_own_versions_are_recorded_as_the_server_said(gateway, agent_key, backend):
    """The embedded server stamps each token itself: nothing is derived, no note is added."""
    url, gw = gateway
    reply = ask(sdk(url, agent_key("inference")), temperature=0)
    drain(gw)
    step = Step.objects.get(pk=reply.id)
    assert set(step_tokens(step)["completion_versions"]) == {1}
    assert "token_versions" not in step.state


def _signed_in(user) -> Client:
    signed_in = Client()
    signed_in.force_login(user)
    return signed_in


def test_a_version_an_operator_sets_on_the_backend_reaches_a_session_already_routed_to_it(
    gateway, agent_key, tenant, server, api_client, fast_refresh
):
    """The session keeps its backend (and the row as it was read) between turns; the new version reaches it
    through the served-versions record that the backend's update declares."""
    url, gw = gateway
    backend = vllm_backend(tenant, server)
    client = sdk(url, agent_key("inference"))
    session = {"extra_headers": {"X-Session-Id": "operator-edit"}}
    first = ask(client, **session)
    changed = api_client(["admin"]).patch(
        f"/api/v1/backends/{backend.pk}/", {"model_version": "5"}, format="json"
    )
    assert changed.status_code == 200, changed.content
    wait_until_swap_seen(gw, backend.pk, "5")
    second = ask(client, **session)
    drain(gw)

    assert step_tokens(Step.objects.get(pk=first.id))["completion_versions"] == [3] * 6
    later = Step.objects.get(pk=second.id)
    assert later.trajectory_id == Step.objects.get(pk=first.id).trajectory_id
    assert step_tokens(later)["completion_versions"] == [5] * 6


def test_a_replay_against_a_versionless_backend_carries_its_version(
    gateway, agent_key, tenant, server, api_client
):
    """Replays run in a worker, off the gateway: they read the backend's swaps from the cache themselves."""
    from apps.trajectories.models import Trajectory
    from apps.trajectories.tasks import replay_trajectory

    url, gw = gateway
    vllm_backend(tenant, server)
    reply = ask(sdk(url, agent_key("inference")))
    drain(gw)
    source = Step.objects.get(pk=reply.id).trajectory
    response = api_client(["trajectories:write"]).post(
        f"/api/v1/trajectories/{source.id}/replay/", {"model": MODEL, "model_version": "3"}, format="json"
    )
    assert response.status_code == 202, response.content
    replay = Trajectory.objects.get(pk=response.json()["trajectory_id"])
    arguments = {
        "tenant_id": tenant.pk,
        "source_id": str(source.id),
        "session_id": replay.session_id,
        "model": MODEL,
        "model_version": "3",
    }
    assert replay_trajectory.apply(kwargs=arguments).get() == 1
    (again,) = replay.steps.all()
    assert step_tokens(again)["completion_versions"] == [3] * 6
    assert again.state["token_versions"]["version"] == "3"
