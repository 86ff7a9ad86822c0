"""The project's trainer on SmolLM2 (a LoRA step and full steps lower the loss on a small SFT set that teaches
a tool call), the trained result published to the running embedded server and vLLM with no failed request
during the swaps, and then a multi-turn conversation with a real tool call keeps one token prefix."""

import time

import openai
import pytest
import torch

from apps.audit.services import Actor
from apps.inference.admin_tokens import inference_admin_token
from apps.inference.models import BackendKind, InferenceBackend
from apps.training.publication import model_version_publish
from apps.training.selectors import training_records
from apps.training.services import model_version_register
from tests.gateway.conftest import agent_key, gateway  # noqa: F401  (fixtures)
from tests.gateway.helpers import drain
from tests.real_model.conftest import SERVED_MODEL
from tests.real_model.helpers import (
    LOGPROB_TOLERANCE,
    WEATHER_TOOL,
    completion_ids_of,
    embedded_backend,
    ensure_serving,
    prompt_ids,
    recorded,
    register_backend,
    sdk,
    server_version,
)
from tests.vllm.reference import ReferenceModel
from tests.vllm.request_loop import RequestLoop
from workers.atdp.training_view import training_samples
from workers.engines import TrainConfig, Trainer
from workers.engines.config import LoraSettings
from workers.inference.modelgen import tokenizer_fingerprint
from workers.inference.vllm import VllmAdmin
from workers.rl.samples import TrainingSample

pytestmark = pytest.mark.real_model

SYSTEM = Actor.system("real-model tier")
TRAIN_CITIES = ("Paris", "Tokyo")
FULL_STEPS = 3
TRAINED_VERSION = 1
# Old and new weights must be told apart by far more than the serving tolerance.
DISTINCT = 100 * LOGPROB_TOLERANCE


def _call(city: str) -> str:
    return f'<tool_call>{{"name": "get_weather", "arguments": {{"city": "{city}"}}}}</tool_call>'


def _sft_set(tokenizer) -> list[TrainingSample]:
    """Weather questions answered by a tool call, the loss on the call and the end of the turn only."""
    samples = []
    for index, city in enumerate(TRAIN_CITIES):
        prompt = prompt_ids(
            tokenizer, [{"role": "user", "content": f"What is the weather in {city}?"}], tools=[WEATHER_TOOL]
        )
        completion = completion_ids_of(tokenizer, _call(city), stopped=True)
        ids = prompt + completion
        samples.append(
            TrainingSample(
                input_ids=tuple(ids),
                loss_mask=tuple([0] * len(prompt) + [1] * len(completion)),
                logprobs=tuple([0.0] * len(ids)),
                versions=tuple([-1] * len(prompt) + [0] * len(completion)),
                turns=tuple([0] * len(ids)),
                reward=1.0,
                group_id=f"sft-{index}",
                task_id="weather",
                trajectory_id=f"sft-{index}",
                step_ids=(f"sft-{index}",),
            )
        )
    return samples


def _loss(trainer: Trainer, samples) -> float:
    """Mean negative log-likelihood of the trained tokens under the trainer's current weights."""
    logprobs = trainer.logprobs([sample.input_ids for sample in samples])
    total = sum(
        -(lp * torch.tensor(s.loss_mask, dtype=torch.float32)).sum()
        for lp, s in zip(logprobs, samples, strict=True)
    )
    return float(total) / sum(sum(sample.loss_mask) for sample in samples)


# Session-scoped: pytest-django runs the transactional tests after the others, so a module's tests do
# not run together and a module-scoped fixture would be built twice (trained twice).
@pytest.fixture(scope="session")
def sft_set(tokenizer):
    return _sft_set(tokenizer)


@pytest.fixture(scope="session")
def full_run(smollm2_dir, sft_set, tmp_path_factory):
    """FULL_STEPS full fine-tuning steps: (the loss before each step, from the step itself, and after the
    last; the exported directory)."""
    trainer = Trainer(
        smollm2_dir, TrainConfig(algorithm="sft", learning_rate=5e-5, total_steps=FULL_STEPS), device="cpu"
    )
    losses = [trainer.step(sft_set, current_version=0).loss for _ in range(FULL_STEPS)]
    losses.append(_loss(trainer, sft_set))
    out = trainer.export(tmp_path_factory.mktemp("trained") / "sft-full")
    del trainer
    return losses, out


@pytest.fixture(scope="session")
def trained_reference(full_run):
    return ReferenceModel(full_run[1])


def test_a_lora_step_lowers_the_loss(smollm2_dir, sft_set):
    trainer = Trainer(
        smollm2_dir,
        TrainConfig(algorithm="sft", learning_rate=1e-3, lora=LoraSettings(rank=8, alpha=16)),
        device="cpu",
    )
    before = trainer.step(sft_set, current_version=0).loss  # the step's loss is the pre-update one
    after = _loss(trainer, sft_set)
    assert after < 0.8 * before, (before, after)


def test_full_steps_lower_the_loss(full_run, smollm2_dir):
    losses, exported = full_run
    assert all(later < earlier for earlier, later in zip(losses, losses[1:], strict=False)), losses
    assert losses[-1] < 0.2 * losses[0], losses
    assert tokenizer_fingerprint(exported) == tokenizer_fingerprint(smollm2_dir)


def _served_by(record, old, new) -> str:
    """Which weights produced a request's tokens: "old", "new", or "old→new" for an embedded request that
    was generating during the swap (its cache recomputed under the new weights, it went on with them; each
    token says its version). Every logprob must be the reference's of the version that produced it."""
    choice = record.parsed.choices[0]
    prompt, completion = record.parsed.prompt_token_ids, choice.completion_token_ids
    by_old = old.token_logprobs(prompt, completion)
    by_new = new.token_logprobs(prompt, completion)
    versions = choice.policy_versions  # the embedded server's; vLLM reports none (pause: whole requests)
    if versions is not None and len(set(versions)) > 1:
        if list(versions) != sorted(versions):
            return f"versions out of order {versions}"
        expected = [
            by_new[i] if version == TRAINED_VERSION else by_old[i] for i, version in enumerate(versions)
        ]
        error = max(abs(want - got) for want, got in zip(expected, choice.logprobs, strict=True))
        return "old→new" if error <= LOGPROB_TOLERANCE else f"neither per token ({error:.2e})"
    old_error = max(abs(want - got) for want, got in zip(by_old, choice.logprobs, strict=True))
    new_error = max(abs(want - got) for want, got in zip(by_new, choice.logprobs, strict=True))
    if old_error <= LOGPROB_TOLERANCE < new_error:
        return "old"
    if new_error <= LOGPROB_TOLERANCE < old_error:
        return "new"
    return f"neither (old {old_error:.2e}, new {new_error:.2e})"


@pytest.mark.django_db(transaction=True)
def test_publishing_the_trained_version_swaps_both_servers_with_no_failed_request(
    tenant, smollm2_dir, full_run, embedded_url, vllm, reference, trained_reference
):
    _, trained_dir = full_run
    base = model_version_register(
        tenant=tenant,
        actor=SYSTEM,
        name=SERVED_MODEL,
        checkpoint_path=str(smollm2_dir),
        tokenizer_hash=tokenizer_fingerprint(smollm2_dir),
        status="production",
    )
    trained = model_version_register(
        tenant=tenant,
        actor=SYSTEM,
        name=SERVED_MODEL,
        checkpoint_path=str(trained_dir),
        tokenizer_hash=base.tokenizer_hash,
        parent=base,
    )
    assert trained.number == TRAINED_VERSION
    ensure_serving(BackendKind.EMBEDDED, embedded_url, smollm2_dir, 0)
    ensure_serving(BackendKind.VLLM, vllm.base_url, smollm2_dir, 0)
    embedded_backend(tenant, embedded_url)
    register_backend(tenant, name="vllm-cpu", url=vllm.base_url, kind=BackendKind.VLLM)
    # A request that hangs times out (a failure the assertions name) well before the waits below give up.
    clients = [
        openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)
        for url in (embedded_url, vllm.base_url)
    ]
    # Bounded only as a safety net: the loops must still be sending when the publication ends, however long
    # the servers take on a busy machine; the test stops them once each has answered twice after it.
    loops = [
        RequestLoop(client, SERVED_MODEL, threads=1, max_requests=1000, max_seconds=1200)
        for client in clients
    ]
    for loop in loops:
        loop.__enter__()
    try:
        for loop in loops:
            loop.wait_for(2, timeout_s=300)
        publish_started = time.monotonic()
        outcomes = model_version_publish(tenant=tenant, actor=SYSTEM, version=trained, timeout=300)
        published = time.monotonic()
        for loop in loops:
            loop.wait_for(2, started_after=published, timeout_s=300)
    finally:
        for loop in loops:
            loop.__exit__(None, None, None)

    assert [(outcome.backend, outcome.ok, outcome.error) for outcome in outcomes] == [
        ("embedded", True, ""),
        ("vllm-cpu", True, ""),
    ]
    assert set(InferenceBackend.objects.filter(tenant=tenant).values_list("model_version", flat=True)) == {
        "1"
    }
    # vLLM pauses ("wait"): each request runs wholly on one version; the embedded server may switch one
    # mid-generation (old→new).
    for loop, allowed in zip(loops, ({"old", "new", "old→new"}, {"old", "new"}), strict=True):
        assert loop.failures == []
        served_by = [_served_by(record, reference, trained_reference) for record in loop.records]
        assert set(served_by) <= allowed, served_by
        assert "new" in served_by, served_by
        for record, version in zip(loop.records, served_by, strict=True):
            if record.finished < publish_started:
                assert version == "old"
            if record.started > published:
                assert version == "new"
    assert server_version(embedded_url, inference_admin_token(embedded_url)) == TRAINED_VERSION
    with VllmAdmin(vllm.base_url) as admin:
        assert admin.weight_version() == str(TRAINED_VERSION)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", [BackendKind.EMBEDDED, BackendKind.VLLM])
def test_a_conversation_with_a_real_tool_call_keeps_one_token_prefix(
    gateway,  # noqa: F811
    agent_key,  # noqa: F811
    tenant,
    full_run,
    embedded_url,
    vllm,
    kind,
):
    """The trained model calls the tool; the agent sends the call back with the tool's result. The second
    prompt starts with the first prompt and the generated call token for token, because the template
    renders a call the way the model wrote it (canonical JSON: `{"name": ..., "arguments": {...}}` with
    `", "` and `": "` separators, keys sorted). A model writing other JSON spacing would break this prefix;
    the training view then starts a new sample at that turn (workers/atdp/training_view.py)."""
    url, gw = gateway
    server_url = embedded_url if kind == BackendKind.EMBEDDED else vllm.base_url
    ensure_serving(kind, server_url, full_run[1], TRAINED_VERSION)
    register_backend(tenant, name=str(kind), url=server_url, kind=kind, version=str(TRAINED_VERSION))
    client = sdk(url, agent_key("inference"), default_headers={"X-Session-Id": f"tool-turns-{kind}"})
    messages = [{"role": "user", "content": "What is the weather in Madrid?"}]
    first = client.chat.completions.create(
        model=SERVED_MODEL, messages=messages, tools=[WEATHER_TOOL], max_tokens=40, temperature=0
    )
    [call] = first.choices[0].message.tool_calls
    assert (call.function.name, call.function.arguments) == ("get_weather", '{"city": "Madrid"}')
    messages += [
        first.choices[0].message.model_dump(include={"role", "content", "tool_calls"}, exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "18 C, sunny"},
    ]
    second = client.chat.completions.create(
        model=SERVED_MODEL, messages=messages, tools=[WEATHER_TOOL], max_tokens=12, temperature=0
    )
    drain(gw)

    (one, first_tokens), (two, second_tokens) = recorded(first.id), recorded(second.id)
    so_far = first_tokens["prompt_ids"] + first_tokens["completion_ids"]
    assert second_tokens["prompt_ids"][: len(so_far)] == so_far
    assert one.trajectory_id == two.trajectory_id
    [record] = training_records(tenant=tenant, trajectory_ids=[one.trajectory_id])
    [sample] = training_samples(record)
    assert sample["input_ids"] == second_tokens["prompt_ids"] + second_tokens["completion_ids"]
