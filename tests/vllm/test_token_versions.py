"""Per-token policy versions through the gateway in front of the real vLLM server, which reports none: a
publication through the REST API (pause, reload, weight version, resume) changes the version every later
token is recorded with, and the recorded logprobs are those of the weights that version names; with vLLM's
`keep` pause mode a stream in flight across the publication is split between the two versions.

Like test_gateway.py these need Django and the database. Each test puts the base weights back."""

import openai
import pytest

from apps.audit.services import Actor
from apps.inference.models import BackendKind, BackendState
from apps.tenants.models import PiiMode, TenantPolicy
from apps.training.models import VersionStatus
from apps.training.services import model_version_register
from apps.trajectories.models import Step
from tests.gateway.conftest import agent_key, gateway  # noqa: F401  (fixtures)
from tests.gateway.helpers import drain, step_tokens, wait_until_swap_seen
from tests.inference.factories import BackendFactory
from tests.vllm.conftest import SERVED_MODEL
from tests.vllm.helpers import CHAT_MESSAGES, LOGPROB_TOLERANCE
from tests.vllm.reference import ReferenceModel
from workers.inference.modelgen import tokenizer_fingerprint
from workers.inference.vllm_weights import write_perturbed_checkpoint

pytestmark = [pytest.mark.vllm, pytest.mark.django_db(transaction=True)]
SYSTEM = Actor.system("test")
DISTINCT = 100 * LOGPROB_TOLERANCE  # old and new weights differ by far more than served/reference noise
# Long enough that the stream is still generating when the publication pauses the server (the server does not
# wait for the client to read, so a short stream is done before the swap).
STREAM_TOKENS = 1900


@pytest.fixture
def lineage(tenant, model_dir, tmp_path):
    """Versions 0 (the server's weights), 1 and 2 (perturbed copies) of the served model."""
    versions = [
        model_version_register(
            tenant=tenant,
            actor=SYSTEM,
            name=SERVED_MODEL,
            checkpoint_path=str(model_dir),
            tokenizer_hash=tokenizer_fingerprint(model_dir),
            status=VersionStatus.PRODUCTION,
        )
    ]
    for number in (1, 2):
        checkpoint = write_perturbed_checkpoint(model_dir, tmp_path / f"v{number}", scale=0.02, seed=number)
        versions.append(
            model_version_register(
                tenant=tenant,
                actor=SYSTEM,
                name=SERVED_MODEL,
                checkpoint_path=str(checkpoint),
                tokenizer_hash=versions[0].tokenizer_hash,
                parent=versions[-1],
            )
        )
    return versions


@pytest.fixture
def vllm_backend(tenant, vllm_server, lineage, admin, model_dir, settings):
    settings.AREAL_GATEWAY_SWAP_REFRESH_MS = 20
    # These tests read the token data of sampled text, and sampled text can look like PII (a run of digits
    # reads as a phone number): redaction, the default, would then drop the ids, as it must.
    TenantPolicy.objects.update_or_create(tenant=tenant, defaults={"pii_mode": PiiMode.OFF})
    backend = BackendFactory(
        tenant=tenant,
        name="vllm-cpu",
        base_url=vllm_server.base_url,
        kind=BackendKind.VLLM,
        served_model=SERVED_MODEL,
        model_version="0",
        state=BackendState.UP,
    )
    yield backend
    admin.publish_full_weights(model_dir, version="base")  # the rest of the tier expects the base weights


def publish(api_client, version) -> None:
    response = api_client(["admin"]).post(f"/api/v1/model-versions/{version.pk}/publish/")
    assert response.status_code == 200, response.content
    outcomes = response.json()["backends"]
    assert [(outcome["ok"], outcome["error"]) for outcome in outcomes] == [(True, "")], outcomes


def sdk(url, key):
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=120)


def max_error(reference: ReferenceModel, tokens: dict) -> float:
    expected = reference.token_logprobs(tokens["prompt_ids"], tokens["completion_ids"])
    return max(abs(want - got) for want, got in zip(expected, tokens["completion_logprobs"], strict=True))


def test_a_publication_changes_the_version_recorded_on_every_later_token(
    gateway,  # noqa: F811
    agent_key,  # noqa: F811
    vllm_backend,
    lineage,
    api_client,
    admin,
):
    url, gw = gateway
    client = sdk(url, agent_key("inference"))
    request = {
        "model": SERVED_MODEL,
        "messages": CHAT_MESSAGES,
        "max_tokens": 12,
        "temperature": 1.0,
        "seed": 3,
    }
    before = client.chat.completions.create(**request)
    publish(api_client, lineage[1])
    wait_until_swap_seen(gw, vllm_backend.pk, "1")
    after = client.chat.completions.create(**request)
    streamed = [chunk.id for chunk in client.chat.completions.create(**request, stream=True)]
    drain(gw)

    assert admin.weight_version() == "1"
    old, new = ReferenceModel(lineage[0].checkpoint_path), ReferenceModel(lineage[1].checkpoint_path)
    first = step_tokens(Step.objects.get(pk=before.id))
    assert set(first["completion_versions"]) == {0}
    assert max_error(old, first) <= LOGPROB_TOLERANCE
    for step_id in (after.id, streamed[0]):
        step = Step.objects.get(pk=step_id)
        tokens = step_tokens(step)
        assert tokens["completion_versions"] == [1] * len(tokens["completion_ids"])
        assert step.policy_version == 1
        assert step.state["token_versions"]["version"] == "1"
        assert max_error(new, tokens) <= LOGPROB_TOLERANCE < DISTINCT < max_error(old, tokens)


@pytest.mark.xfail(
    strict=False,
    reason="timing: on 2 loaded cores the publication can land after a 1,900-token stream ends (seen after the "
    "whole suite, 2026-12-01); passes run alone. Open: make the swap wait for the stream, not the clock.",
)
def test_a_stream_in_flight_across_a_keep_mode_publication_is_split_between_versions(
    gateway,  # noqa: F811
    agent_key,  # noqa: F811
    vllm_backend,
    lineage,
    api_client,
    settings,
):
    """vLLM's `keep` pause freezes the stream and continues it on the new weights: tokens the gateway received
    before the resume carry version 1, those after it version 2."""
    settings.AREAL_VLLM_PAUSE_MODE = "keep"
    url, gw = gateway
    client = sdk(url, agent_key("inference"))
    publish(api_client, lineage[1])  # the stream below starts on version 1 (its step reads both swaps)
    stream = iter(
        client.chat.completions.create(
            model=SERVED_MODEL,
            messages=CHAT_MESSAGES,
            max_tokens=STREAM_TOKENS,
            temperature=1.0,
            seed=5,
            stream=True,
            extra_body={"ignore_eos": True},
        )
    )
    received = [next(stream), next(stream)]  # the stream is under way on version 1
    publish(api_client, lineage[2])
    received += list(stream)
    drain(gw)

    step = Step.objects.get(pk=received[0].id)
    versions = step_tokens(step)["completion_versions"]
    assert len(versions) == STREAM_TOKENS
    assert versions == sorted(versions), "versions go back in time"
    assert versions[0] == 1, "the first tokens came before the publication"
    assert versions[-1] == 2, "the stream ended before the swap: the server generates too fast for this test"
    note = step.state["token_versions"]
    assert (note["split"], note["swap"]["from"], note["swap"]["to"]) == ("stream", "1", "2")
    assert "warning" not in note
