import httpx
import openai
import pytest

from workers.inference.modelgen import MAX_POSITION_EMBEDDINGS as CONTEXT

CHAT = {"model": "default", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def post(server, path, **kwargs):
    return httpx.post(f"{server.api_url}/{path}", timeout=30, **kwargs)


def assert_openai_error(response, status):
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) >= {"message", "type", "code"}
    assert error["message"]
    return error


def test_unknown_model_is_404(server):
    error = assert_openai_error(post(server, "chat/completions", json={**CHAT, "model": "gpt-17"}), 404)
    assert error["code"] == "model_not_found"
    assert "gpt-17" in error["message"]
    assert_openai_error(post(server, "completions", json={"model": "gpt-17", "prompt": "x"}), 404)


def test_sdk_sees_typed_errors(server):
    sdk = openai.OpenAI(base_url=server.api_url, api_key="unused", max_retries=0)
    with pytest.raises(openai.NotFoundError):
        sdk.chat.completions.create(model="nope", messages=CHAT["messages"])
    with pytest.raises(openai.BadRequestError, match=f"maximum context length is {CONTEXT}"):
        sdk.chat.completions.create(model="default", messages=CHAT["messages"], max_tokens=CONTEXT + 100)


def test_prompt_plus_max_tokens_over_the_context_is_400_with_the_limit(server):
    error = assert_openai_error(
        post(server, "chat/completions", json={**CHAT, "max_tokens": CONTEXT - 4}), 400
    )
    assert f"maximum context length is {CONTEXT} tokens" in error["message"]
    assert error["code"] == "context_length_exceeded"
    long_prompt = [5 + position % 1000 for position in range(CONTEXT + 1)]  # ids within the vocabulary
    error = assert_openai_error(
        post(server, "completions", json={"prompt": long_prompt, "max_tokens": 1}), 400
    )
    assert str(CONTEXT) in error["message"]


def test_malformed_json_is_400(server):
    error = assert_openai_error(
        post(server, "chat/completions", content=b'{"model": "default", "messages": ['), 400
    )
    assert error["code"] == "invalid_json"
    assert_openai_error(post(server, "completions", content=b"[1, 2]"), 400)


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": -1}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"max_tokens": -1}, "max_tokens"),
        ({"max_tokens": "many"}, "max_tokens"),
        ({"n": 0}, "n"),
        ({"n": 1.5}, "n"),
        ({"stream": "yes"}, "stream"),
        ({"stop": 5}, "stop"),
        ({"seed": "abc"}, "seed"),
        ({"messages": "hi"}, "messages"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"logprobs": True, "top_logprobs": 50}, "top_logprobs"),
        ({"tools": [{"type": "function"}]}, "tools"),
        ({"tool_choice": "sometimes", "tools": []}, "tool_choice"),
        ({"frequency_penalty": 0.5}, "frequency_penalty"),
    ],
)
def test_wrong_chat_fields_are_400_naming_the_field(server, change, param):
    error = assert_openai_error(post(server, "chat/completions", json={**CHAT, **change}), 400)
    assert error["param"] == param
    assert param in error["message"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": 42}, "prompt"),
        ({"prompt": [1, "a"]}, "prompt"),
        ({"prompt": "x", "logprobs": True}, "logprobs"),
        ({"prompt": "x", "echo": True}, "echo"),
    ],
)
def test_wrong_completion_fields_are_400(server, body, param):
    error = assert_openai_error(post(server, "completions", json=body), 400)
    assert error["param"] == param


def test_prompt_token_ids_outside_the_vocabulary_are_400(server):
    error = assert_openai_error(
        post(server, "completions", json={"prompt": [1, 999999], "max_tokens": 2}), 400
    )
    assert "token ids" in error["message"]


def test_unknown_route_and_method_are_openai_shaped(server):
    assert_openai_error(httpx.get(f"{server.base_url}/v1/embeddings"), 404)
    assert_openai_error(httpx.get(f"{server.api_url}/chat/completions"), 405)
