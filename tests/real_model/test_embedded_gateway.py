"""SmolLM2 on the embedded server behind the gateway, through the official openai SDK: every recorded token
is the tokenizer's, every logprob a float32 forward pass's, multi-turn conversations keep one token prefix,
and text outside ASCII streams and is recorded byte for byte."""

import pytest

from apps.inference.models import BackendKind
from apps.training.selectors import training_records
from tests.gateway.conftest import agent_key, gateway  # noqa: F401  (fixtures)
from tests.gateway.helpers import drain
from tests.real_model.conftest import SERVED_MODEL
from tests.real_model.helpers import (
    LOGPROB_TOLERANCE,
    UNICODE_LINE,
    UNICODE_PROMPT,
    completion_ids_of,
    embedded_backend,
    ensure_serving,
    max_error,
    prompt_ids,
    recorded,
    sdk,
)
from workers.atdp.training_view import training_samples

pytestmark = [pytest.mark.real_model, pytest.mark.django_db(transaction=True)]

QUESTION = [
    {"role": "system", "content": "You are a concise assistant."},
    {"role": "user", "content": "What is the capital of France?"},
]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_recorded_tokens_are_the_tokenizers_and_logprobs_a_forward_passs(
    gateway,  # noqa: F811
    agent_key,  # noqa: F811
    tenant,
    embedded_url,
    smollm2_dir,
    tokenizer,
    reference,
    stream,
):
    url, gw = gateway
    ensure_serving(BackendKind.EMBEDDED, embedded_url, smollm2_dir, 0)
    embedded_backend(tenant, embedded_url)
    client = sdk(url, agent_key("inference"))
    request = {"model": SERVED_MODEL, "messages": QUESTION, "max_tokens": 16, "temperature": 0}
    if stream:
        chunks = list(client.chat.completions.create(**request, stream=True))
        step_id = chunks[0].id
        text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
        finish = [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices][-1]
    else:
        reply = client.chat.completions.create(**request)
        step_id, text, finish = reply.id, reply.choices[0].message.content, reply.choices[0].finish_reason
    drain(gw)

    step, tokens = recorded(step_id)
    assert tokens["prompt_ids"] == prompt_ids(tokenizer, QUESTION)
    assert tokens["completion_ids"] == completion_ids_of(tokenizer, text, stopped=finish == "stop")
    assert "Paris" in text  # a real model answers
    assert max_error(reference, tokens) <= LOGPROB_TOLERANCE
    assert step.action["text"] == text
    assert tokens["completion_versions"] == [0] * len(tokens["completion_ids"])
    assert step.backend_name == "embedded"


def test_a_multi_turn_conversation_keeps_one_token_prefix(
    gateway,  # noqa: F811
    agent_key,  # noqa: F811
    tenant,
    embedded_url,
    smollm2_dir,
    tokenizer,
):
    """Each turn's prompt starts with the previous turn's prompt and completion, token for token, so the
    training view merges the whole conversation into one sample."""
    url, gw = gateway
    ensure_serving(BackendKind.EMBEDDED, embedded_url, smollm2_dir, 0)
    embedded_backend(tenant, embedded_url)
    client = sdk(url, agent_key("inference"), default_headers={"X-Session-Id": "real-multi-turn"})
    messages = list(QUESTION)
    step_ids = []
    for follow_up in ("And of Italy?", "Which of the two is larger?"):
        reply = client.chat.completions.create(
            model=SERVED_MODEL, messages=messages, max_tokens=24, temperature=0
        )
        step_ids.append(reply.id)
        messages += [
            {"role": "assistant", "content": reply.choices[0].message.content},
            {"role": "user", "content": follow_up},
        ]
    step_ids.append(
        client.chat.completions.create(model=SERVED_MODEL, messages=messages, max_tokens=8, temperature=0).id
    )
    drain(gw)

    turns = [recorded(step_id) for step_id in step_ids]
    for (_, earlier), (_, later) in zip(turns, turns[1:], strict=False):
        so_far = earlier["prompt_ids"] + earlier["completion_ids"]
        assert later["prompt_ids"][: len(so_far)] == so_far
    steps = [step for step, _ in turns]
    assert len({step.trajectory_id for step in steps}) == 1
    [record] = training_records(tenant=tenant, trajectory_ids=[steps[0].trajectory_id])
    [sample] = training_samples(record)
    assert sample["input_ids"] == turns[-1][1]["prompt_ids"] + turns[-1][1]["completion_ids"]


def test_cjk_emoji_and_combining_characters_stream_and_are_recorded_exactly(
    gateway,  # noqa: F811
    agent_key,  # noqa: F811
    tenant,
    embedded_url,
    smollm2_dir,
    tokenizer,
    reference,
):
    url, gw = gateway
    ensure_serving(BackendKind.EMBEDDED, embedded_url, smollm2_dir, 0)
    embedded_backend(tenant, embedded_url)
    client = sdk(url, agent_key("inference"))
    chunks = list(
        client.completions.create(
            model=SERVED_MODEL, prompt=UNICODE_PROMPT, max_tokens=24, temperature=0, stream=True
        )
    )
    streamed = "".join(chunk.choices[0].text for chunk in chunks if chunk.choices)
    finish = [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices][-1]
    chat = list(
        client.chat.completions.create(
            model=SERVED_MODEL,
            messages=[{"role": "user", "content": f"Repeat: {UNICODE_LINE}"}],
            max_tokens=12,
            temperature=0,
            stream=True,
        )
    )
    chat_text = "".join(chunk.choices[0].delta.content or "" for chunk in chat if chunk.choices)
    drain(gw)

    step, tokens = recorded(chunks[0].id)
    assert tokens["prompt_ids"] == tokenizer(UNICODE_PROMPT, add_special_tokens=False).input_ids
    assert step.observation["prompt"] == UNICODE_PROMPT  # the combining accent kept, not normalized
    assert step.action["text"] == streamed == tokenizer.decode(tokens["completion_ids"])
    # Characters split between tokens come out whole; only a generation cut by max_tokens inside a
    # character's bytes ends in U+FFFD, as the tokenizer's own decoding of those ids does.
    assert "\ufffd" not in streamed.rstrip("\ufffd")
    assert not streamed.endswith("\ufffd") or finish == "length"
    for piece in ("你好世界", "🙂", "👍🏽", "café"):  # SmolLM2 continues the list in kind
        assert piece in streamed, streamed
    assert max_error(reference, tokens) <= LOGPROB_TOLERANCE

    chat_step, chat_tokens = recorded(chat[0].id)
    sent = [{"role": "user", "content": f"Repeat: {UNICODE_LINE}"}]
    assert chat_step.observation["messages"] == sent
    assert chat_tokens["prompt_ids"] == prompt_ids(tokenizer, sent)
    assert chat_step.action["text"] == chat_text
    assert "\ufffd" not in chat_text.rstrip("\ufffd")
