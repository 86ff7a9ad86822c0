"""The official openai SDK pointed straight at the embedded server."""

import asyncio
import time

import httpx
import openai
import pytest
import torch

from tests.workers.inference.conftest import load_reference_model, reference_logprobs
from workers.inference.client import parse_response, request_completion
from workers.inference.modelgen import MAX_POSITION_EMBEDDINGS

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 2?"}]
TOKEN_DATA = {"return_token_ids": True}


@pytest.fixture(scope="module")
def sdk(server):
    return openai.OpenAI(base_url=server.api_url, api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def reference(default_model_dir):
    return load_reference_model(default_model_dir)


def expected_prompt_ids(server, messages):
    tokenizer = server.engine.tokenizer
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_models_lists_the_served_name(sdk, server):
    [model] = sdk.models.list().data
    assert model.id == "default"
    assert model.model_extra["max_model_len"] == MAX_POSITION_EMBEDDINGS == 4096


def test_health(server):
    response = httpx.get(f"{server.base_url}/health")
    assert response.status_code == 200
    assert response.json()["status"] == "ok"


def test_chat_completion_carries_token_ids_and_raw_logprobs(sdk, server, reference):
    completion = sdk.chat.completions.create(
        model="default",
        messages=MESSAGES,
        max_tokens=12,
        temperature=0.8,
        seed=3,
        logprobs=True,
        top_logprobs=3,
        extra_body={**TOKEN_DATA, "ignore_eos": True},
    )
    extra = completion.model_extra
    [choice] = completion.choices
    token_ids = choice.model_extra["token_ids"]
    assert extra["prompt_token_ids"] == expected_prompt_ids(server, MESSAGES)
    assert len(token_ids) == 12 == completion.usage.completion_tokens
    assert choice.finish_reason == "length"
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str)
    assert choice.model_extra["token_policy_versions"] == [0] * 12
    assert extra["policy_version"] == 0
    entries = choice.logprobs.content
    assert [len(entry.top_logprobs) for entry in entries] == [3] * 12
    assert all(entry.top_logprobs[0].logprob >= entry.top_logprobs[-1].logprob for entry in entries)
    expected = reference_logprobs(reference, extra["prompt_token_ids"], token_ids)
    assert torch.allclose(torch.tensor([entry.logprob for entry in entries]), expected, atol=1e-4, rtol=0)
    assert server.engine.tokenizer.decode(token_ids, skip_special_tokens=True) == choice.message.content


def test_streamed_chat_matches_the_non_streamed_one(sdk):
    arguments = {
        "model": "default",
        "messages": MESSAGES,
        "max_tokens": 10,
        "temperature": 0,
        "logprobs": True,
        "extra_body": {**TOKEN_DATA, "ignore_eos": True},
    }
    whole = sdk.chat.completions.create(**arguments)
    chunks = list(
        sdk.chat.completions.create(**arguments, stream=True, stream_options={"include_usage": True})
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[0].model_extra["prompt_token_ids"] == whole.model_extra["prompt_token_ids"]
    assert all("prompt_token_ids" not in chunk.model_extra for chunk in chunks[1:])
    content = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    token_ids = [
        t for chunk in chunks if chunk.choices for t in chunk.choices[0].model_extra.get("token_ids", [])
    ]
    logprobs = [
        entry.logprob
        for chunk in chunks
        if chunk.choices and chunk.choices[0].logprobs
        for entry in chunk.choices[0].logprobs.content
    ]
    assert content == whole.choices[0].message.content
    assert token_ids == whole.choices[0].model_extra["token_ids"]
    assert logprobs == pytest.approx([entry.logprob for entry in whole.choices[0].logprobs.content], abs=1e-5)
    finishing = [
        chunk.choices[0].finish_reason for chunk in chunks if chunk.choices and chunk.choices[0].finish_reason
    ]
    assert finishing == ["length"]
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == 10


def test_n_choices_stream_separately(sdk):
    chunks = list(
        sdk.chat.completions.create(
            model="default",
            messages=MESSAGES,
            n=3,
            max_tokens=5,
            temperature=1,
            seed=1,
            stream=True,
            extra_body={"ignore_eos": True},
        )
    )
    finished = sorted(c.choices[0].index for c in chunks if c.choices and c.choices[0].finish_reason)
    assert finished == [0, 1, 2]


def test_completions_endpoint_with_token_data(sdk, server, reference):
    prompt = "The agent reads the file"
    completion = sdk.completions.create(
        model="default",
        prompt=prompt,
        max_tokens=8,
        temperature=0,
        logprobs=2,
        extra_body={**TOKEN_DATA, "ignore_eos": True},
    )
    [choice] = completion.choices
    prompt_ids = choice.model_extra["prompt_token_ids"]
    assert prompt_ids == server.engine.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    expected = reference_logprobs(reference, prompt_ids, choice.model_extra["token_ids"])
    assert torch.allclose(torch.tensor(choice.logprobs.token_logprobs), expected, atol=1e-4, rtol=0)
    assert len(choice.logprobs.top_logprobs[0]) == 2
    assert choice.logprobs.text_offset[0] == 0
    assert "".join(choice.logprobs.tokens) == choice.text


def test_streamed_completions_and_several_prompts(sdk):
    chunks = list(
        sdk.completions.create(
            model="default",
            prompt=["One", "Two words"],
            max_tokens=4,
            temperature=0,
            stream=True,
            extra_body={**TOKEN_DATA, "ignore_eos": True},
        )
    )
    by_index = {}
    for chunk in chunks:
        for choice in chunk.choices:
            by_index.setdefault(choice.index, []).extend(choice.model_extra["token_ids"])
    assert sorted(by_index) == [0, 1]
    assert all(len(ids) == 4 for ids in by_index.values())
    whole = sdk.completions.create(
        model="default",
        prompt=["One", "Two words"],
        max_tokens=4,
        temperature=0,
        extra_body={**TOKEN_DATA, "ignore_eos": True},
    )
    assert [c.model_extra["token_ids"] for c in whole.choices] == [by_index[0], by_index[1]]


def test_async_client_helper_parses_streamed_and_whole_answers_alike(server):
    body = {
        "model": "default",
        "messages": MESSAGES,
        "max_tokens": 6,
        "temperature": 0,
        "logprobs": True,
        "return_token_ids": True,
        "ignore_eos": True,
    }

    async def both():
        async with httpx.AsyncClient(timeout=30) as client:
            url = f"{server.api_url}/chat/completions"
            return (
                await request_completion(client, url, body),
                await request_completion(client, url, {**body, "stream": True}),
            )

    whole, streamed = asyncio.run(both())
    assert whole.has_token_data
    assert streamed.has_token_data
    assert whole.prompt_token_ids == streamed.prompt_token_ids
    assert whole.choices[0].completion_token_ids == streamed.choices[0].completion_token_ids
    assert whole.choices[0].text == streamed.choices[0].text
    assert whole.choices[0].policy_versions == streamed.choices[0].policy_versions == (0,) * 6
    assert streamed.choices[0].logprobs == pytest.approx(whole.choices[0].logprobs, abs=1e-5)


def test_concurrent_http_requests_are_batched(server):
    body = {"model": "default", "prompt": "The store", "max_tokens": 48, "temperature": 0, "ignore_eos": True}

    async def burst():
        async with httpx.AsyncClient(timeout=60) as client:
            return await asyncio.gather(
                *[client.post(f"{server.api_url}/completions", json=body) for _ in range(8)]
            )

    server.engine.reset_stats()
    responses = asyncio.run(burst())
    assert [response.status_code for response in responses] == [200] * 8
    assert len({parse_response(r.json()).choices[0].text for r in responses}) == 1
    stats = server.engine.stats()
    assert stats.max_decode_batch_size >= 6, stats
    assert stats.decode_steps < 4 * 47, stats


def test_client_disconnect_mid_stream_frees_the_batch_slot(server):
    body = {
        "model": "default",
        "prompt": "The store",
        "max_tokens": 900,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
    }
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", f"{server.api_url}/completions", json=body) as reply,
    ):
        lines = reply.iter_lines()
        assert next(line for line in lines if line.startswith("data:"))
    deadline = time.monotonic() + 20
    while server.engine.status().running_sequences:
        assert time.monotonic() < deadline, "the abandoned request kept generating"
        time.sleep(0.02)
