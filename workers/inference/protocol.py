"""Validated request bodies for the OpenAI-compatible endpoints, and the OpenAI-shaped error."""

import json
from dataclasses import dataclass, field
from typing import TypeGuard

from workers.inference.sampling import SamplingParams

MAX_TOP_LOGPROBS = 20
MAX_CHOICES = 16
CHAT_ROLES = {"system", "developer", "user", "assistant", "tool"}
UNSUPPORTED_NONZERO = ("frequency_penalty", "presence_penalty")


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        error_type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
        self.code = code
        self.param = param

    def body(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }


def invalid(param: str, message: str) -> ApiError:
    return ApiError(400, f"{param}: {message}", code="invalid_value", param=param)


@dataclass(frozen=True)
class CommonOptions:
    model: str | None
    params: SamplingParams
    stream: bool
    include_usage: bool
    return_token_ids: bool
    return_tokens_as_token_ids: bool


@dataclass(frozen=True)
class ChatCompletionRequest:
    options: CommonOptions
    messages: tuple = ()
    tools: tuple = ()
    parse_tool_calls: bool = True
    logprobs: bool = False
    add_generation_prompt: bool = True
    template_kwargs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class CompletionRequest:
    options: CommonOptions
    prompts: tuple = ()  # each a str or a tuple of token ids
    logprobs: int | None = None


def decode_json_body(raw: bytes) -> dict:
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ApiError(400, f"request body is not valid JSON: {error}", code="invalid_json") from error
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object", code="invalid_json")
    return body


def parse_chat_request(body: dict) -> ChatCompletionRequest:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("messages", "must be a non-empty array of message objects")
    for index, message in enumerate(messages):
        _check_message(index, message)
    logprobs = _boolean(body, "logprobs", False)
    top_logprobs = _integer(body, "top_logprobs", 0, minimum=0, maximum=MAX_TOP_LOGPROBS)
    if top_logprobs and not logprobs:
        raise invalid("top_logprobs", "requires logprobs to be true")
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(_is_function_tool(tool) for tool in tools):
        raise invalid("tools", 'must be an array of {"type": "function", "function": {"name": ...}} objects')
    tool_choice = body.get("tool_choice", "auto" if tools else "none")
    if tool_choice not in ("none", "auto", "required") and not _is_named_tool_choice(tool_choice):
        raise invalid(
            "tool_choice", 'must be "none", "auto", "required" or {"type": "function", "function": {"name"}}'
        )
    template_kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(template_kwargs, dict):
        raise invalid("chat_template_kwargs", "must be an object")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    return ChatCompletionRequest(
        options=_common_options(body, max_tokens=max_tokens, top_logprobs=top_logprobs),
        messages=tuple(messages),
        tools=tuple(tools),
        parse_tool_calls=bool(tools) and tool_choice != "none",
        logprobs=logprobs,
        add_generation_prompt=_boolean(body, "add_generation_prompt", True),
        template_kwargs=template_kwargs,
    )


def parse_completion_request(body: dict) -> CompletionRequest:
    prompt = body.get("prompt")
    prompts: tuple[str | tuple[int, ...], ...]
    if isinstance(prompt, str):
        prompts = (prompt,)
    elif _is_token_list(prompt):
        prompts = (tuple(prompt),)
    elif isinstance(prompt, list) and prompt and all(isinstance(p, str) or _is_token_list(p) for p in prompt):
        prompts = tuple(p if isinstance(p, str) else tuple(p) for p in prompt)
    else:
        raise invalid("prompt", "must be a string, an array of strings, or an array of token ids")
    if _boolean(body, "echo", False):
        raise invalid("echo", "echo is not supported by the embedded server")
    if body.get("suffix"):
        raise invalid("suffix", "suffix is not supported")
    logprobs = body.get("logprobs")
    if logprobs is not None:
        logprobs = _integer(body, "logprobs", 0, minimum=0, maximum=MAX_TOP_LOGPROBS)
    return CompletionRequest(
        options=_common_options(body, max_tokens=body.get("max_tokens", 16), top_logprobs=logprobs or 0),
        prompts=prompts,
        logprobs=logprobs,
    )


def _common_options(body: dict, *, max_tokens, top_logprobs: int) -> CommonOptions:
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise invalid("model", "must be a string")
    if max_tokens is not None and (not _is_int(max_tokens) or max_tokens < 1):
        raise invalid("max_tokens", "must be a positive integer")
    for name in UNSUPPORTED_NONZERO:
        if _number(body, name, 0.0) != 0:
            raise invalid(name, "is not supported by the embedded server (only 0)")
    stop = body.get("stop")
    if stop is None:
        stop = ()
    elif isinstance(stop, str):
        stop = (stop,)
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        stop = tuple(stop)
    else:
        raise invalid("stop", "must be a string or an array of strings")
    stop_token_ids = body.get("stop_token_ids") or []
    if not _is_token_list(stop_token_ids, allow_empty=True):
        raise invalid("stop_token_ids", "must be an array of integers")
    seed = body.get("seed")
    if seed is not None and not _is_int(seed):
        raise invalid("seed", "must be an integer")
    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise invalid("stream_options", "must be an object")
    stream = _boolean(body, "stream", False)
    params = SamplingParams(
        max_tokens=max_tokens,
        temperature=_number(body, "temperature", 1.0, minimum=0.0),
        top_p=_number(body, "top_p", 1.0, minimum=0.0, maximum=1.0, exclusive_minimum=True),
        n=_integer(body, "n", 1, minimum=1, maximum=MAX_CHOICES),
        stop=stop,
        stop_token_ids=tuple(stop_token_ids),
        seed=seed,
        top_logprobs=top_logprobs,
        ignore_eos=_boolean(body, "ignore_eos", False),
    )
    return CommonOptions(
        model=model,
        params=params,
        stream=stream,
        include_usage=stream and _boolean(stream_options, "include_usage", False),
        return_token_ids=_boolean(body, "return_token_ids", False),
        return_tokens_as_token_ids=_boolean(body, "return_tokens_as_token_ids", False),
    )


def _check_message(index: int, message) -> None:
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise invalid(where, "must be an object")
    if message.get("role") not in CHAT_ROLES:
        raise invalid(f"{where}.role", f"must be one of {sorted(CHAT_ROLES)}")
    content = message.get("content")
    content_is_parts = isinstance(content, list) and all(
        isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
        for part in content
    )
    if not (
        isinstance(content, str) or content_is_parts or (content is None and message["role"] == "assistant")
    ):
        raise invalid(f"{where}.content", "must be a string or an array of text parts")
    tool_calls = message.get("tool_calls")
    if tool_calls is not None and not (
        isinstance(tool_calls, list)
        and all(isinstance(call, dict) and isinstance(call.get("function"), dict) for call in tool_calls)
    ):
        raise invalid(f"{where}.tool_calls", "must be an array of tool call objects")


def _is_function_tool(tool) -> bool:
    return (
        isinstance(tool, dict)
        and tool.get("type", "function") == "function"
        and isinstance(tool.get("function"), dict)
        and isinstance(tool["function"].get("name"), str)
    )


def _is_named_tool_choice(choice) -> bool:
    return (
        isinstance(choice, dict) and isinstance(choice.get("function"), dict) and "name" in choice["function"]
    )


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_token_list(value, *, allow_empty: bool = False) -> TypeGuard[list[int]]:
    return (
        isinstance(value, list) and (allow_empty or bool(value)) and all(_is_int(v) and v >= 0 for v in value)
    )


def _boolean(body: dict, name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise invalid(name, "must be a boolean")
    return value


def _integer(body: dict, name: str, default: int, *, minimum: int, maximum: int) -> int:
    value = body.get(name)
    if value is None:
        return default
    if not _is_int(value):
        raise invalid(name, "must be an integer")
    if not minimum <= value <= maximum:
        raise invalid(name, f"must be between {minimum} and {maximum}")
    return value


def _number(
    body: dict,
    name: str,
    default: float,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    exclusive_minimum: bool = False,
) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise invalid(name, "must be a number")
    too_small = minimum is not None and (value <= minimum if exclusive_minimum else value < minimum)
    if too_small or (maximum is not None and value > maximum):
        bound = "greater than" if exclusive_minimum else "at least"
        raise invalid(
            name, f"must be {bound} {minimum}" + (f" and at most {maximum}" if maximum is not None else "")
        )
    return float(value)
