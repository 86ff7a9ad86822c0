"""Anthropic Messages -> OpenAI chat completions, and Anthropic's error bodies, as pure functions over dicts.

The gateway accepts `POST /v1/messages` (the official `anthropic` SDK, streaming or not, with tool use) and
forwards to backends that only speak `/v1/chat/completions` (the embedded server, vLLM). This module and the
two that translate the answer back (`anthropic_response.py`, a whole message; `anthropic_stream.py`, the
event stream) are the whole translation; they do no I/O and must not import Django.

Request rules (`messages_request_to_chat`):
- `system` (a string or text blocks) becomes a leading system message; several text blocks in one place
  are joined with a newline (`TEXT_JOIN`).
- `text` blocks become message content; `tool_use` blocks become the assistant's `tool_calls` (arguments as
  a JSON string); each `tool_result` becomes a `role: tool` message at its place in the conversation
  (`is_error` prefixes the content with `TOOL_ERROR_PREFIX`, since chat messages have no error flag).
  `thinking` / `redacted_thinking` blocks in assistant history are dropped (their text is not ours to
  replay); `image` and `document` blocks are refused, as are unknown block types.
- A final assistant message is a prefill: the chat body asks vLLM to continue it
  (`continue_final_message: true`, `add_generation_prompt: false`).
- `tools` -> `tools` with `function.parameters`; `tool_choice` auto / any / tool / none -> "auto" /
  "required" / named / "none"; `disable_parallel_tool_use` -> `parallel_tool_calls: false`.
- `max_tokens` (required), `stop_sequences` -> `stop`, `temperature`, `top_p`, `top_k` (a vLLM extension),
  `metadata.user_id` -> `user`, `stream` (with `stream_options.include_usage`).
- Always `logprobs: true` and `return_token_ids: true`, so the backend returns the token data we record.
"""

import json

from apps.core.error_types import anthropic_error_type

TEXT_JOIN = "\n"
TOOL_ERROR_PREFIX = "Error: "

ERROR_TYPES = (
    "invalid_request_error",
    "authentication_error",
    "permission_error",
    "not_found_error",
    "request_too_large",
    "rate_limit_error",
    "api_error",
    "overloaded_error",
)
_DROPPED_BLOCK_TYPES = {"thinking", "redacted_thinking"}
_UNSUPPORTED_BLOCK_TYPES = {"image", "document"}
_TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}


class AnthropicRequestError(ValueError):
    """An invalid Messages request; the caller renders it as a 400 `invalid_request_error`."""

    status = 400

    def __init__(self, message: str, field: str | None = None):
        super().__init__(f"{field}: {message}" if field else message)
        self.message = message
        self.field = field

    def body(self) -> dict:
        return anthropic_error(self.status, str(self))


def anthropic_error(status: int, message: str, *, error_type: str | None = None) -> dict:
    """An Anthropic-shaped error body; the type follows the HTTP status unless given."""
    if error_type is None:
        error_type = anthropic_error_type(status)
    return {"type": "error", "error": {"type": error_type, "message": message}}


def openai_error_to_anthropic(status: int, body) -> dict:
    """A backend's OpenAI-shaped error (or any body) as an Anthropic error with the same status."""
    message = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        message = body["error"].get("message")
    if not isinstance(message, str) or not message:
        message = body if isinstance(body, str) and body else f"inference backend answered {status}"
    return anthropic_error(status, message)


def messages_request_to_chat(body: dict) -> dict:
    """Validate an Anthropic Messages request and return the equivalent chat-completions body."""
    if not isinstance(body, dict):
        raise AnthropicRequestError("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise AnthropicRequestError("required, a non-empty string", "model")
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        raise AnthropicRequestError("required", "max_tokens")
    if not is_int(max_tokens) or max_tokens < 1:
        raise AnthropicRequestError("must be a positive integer", "max_tokens")

    tools = _translate_tools(body.get("tools"))
    messages = _translate_system(body.get("system"))
    conversation, prefill = _translate_messages(body.get("messages"))
    messages.extend(conversation)

    chat = {"model": model, "messages": messages, "max_tokens": max_tokens}
    stop = _stop_sequences(body.get("stop_sequences"))
    if stop:
        chat["stop"] = stop
    for name, low, high in (("temperature", 0.0, 1.0), ("top_p", 0.0, 1.0)):
        value = body.get(name)
        if value is not None:
            if not _is_number(value) or not low <= value <= high:
                raise AnthropicRequestError(f"must be a number between {low:g} and {high:g}", name)
            chat[name] = value
    top_k = body.get("top_k")
    if top_k is not None:
        if not is_int(top_k) or top_k < 0:
            raise AnthropicRequestError("must be a non-negative integer", "top_k")
        chat["top_k"] = top_k
    if tools:
        chat["tools"] = tools
    chat.update(_translate_tool_choice(body.get("tool_choice"), tools))
    user = _metadata_user(body.get("metadata"))
    if user is not None:
        chat["user"] = user
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise AnthropicRequestError("must be a boolean", "stream")
    chat["stream"] = stream
    if stream:
        chat["stream_options"] = {"include_usage": True}
    chat["logprobs"] = True
    chat["return_token_ids"] = True
    if prefill:
        chat["continue_final_message"] = True
        chat["add_generation_prompt"] = False
    return chat


def _translate_system(system) -> list[dict]:
    if system is None:
        return []
    if isinstance(system, str):
        return [{"role": "system", "content": system}] if system else []
    if isinstance(system, list):
        texts = []
        for index, block in enumerate(system):
            where = f"system.{index}"
            if not isinstance(block, dict) or block.get("type") != "text":
                raise AnthropicRequestError("system blocks must be text blocks", where)
            texts.append(_block_text(block, where))
        return [{"role": "system", "content": TEXT_JOIN.join(texts)}] if texts else []
    raise AnthropicRequestError("must be a string or an array of text blocks", "system")


def _translate_messages(messages) -> tuple[list[dict], bool]:
    if not isinstance(messages, list) or not messages:
        raise AnthropicRequestError("must be a non-empty array of messages", "messages")
    out: list[dict] = []
    unanswered: list[str] = []  # tool_use ids of the previous assistant message
    for index, message in enumerate(messages):
        where = f"messages.{index}"
        if not isinstance(message, dict):
            raise AnthropicRequestError("must be an object", where)
        role = message.get("role")
        if role not in ("user", "assistant"):
            raise AnthropicRequestError('must be "user" or "assistant"', f"{where}.role")
        if index == 0 and role != "user":
            raise AnthropicRequestError("the first message must use the user role", f"{where}.role")
        content = message.get("content")
        if isinstance(content, str):
            blocks = [{"type": "text", "text": content}]
        elif isinstance(content, list) and content:
            blocks = content
        else:
            raise AnthropicRequestError(
                "must be a string or a non-empty array of content blocks", f"{where}.content"
            )
        if role == "user":
            answered = _translate_user(blocks, where, set(unanswered), out)
            missing = [tool_id for tool_id in unanswered if tool_id not in answered]
            if missing:
                raise AnthropicRequestError(
                    f"tool_use ids were found without tool_result blocks immediately after: {', '.join(missing)}",
                    where,
                )
            unanswered = []
        else:
            if unanswered:
                raise AnthropicRequestError(
                    f"tool_use ids were found without tool_result blocks immediately after: "
                    f"{', '.join(unanswered)}",
                    where,
                )
            unanswered = _translate_assistant(blocks, where, out)
    if unanswered:
        raise AnthropicRequestError(
            f"tool_use ids were found without tool_result blocks immediately after: {', '.join(unanswered)}",
            f"messages.{len(messages) - 1}",
        )
    prefill = messages[-1]["role"] == "assistant"
    return out, prefill


def _translate_user(blocks: list, where: str, expected_ids: set[str], out: list[dict]) -> set[str]:
    texts: list[str] = []
    answered: set[str] = set()

    def flush_text():
        if texts:
            out.append({"role": "user", "content": TEXT_JOIN.join(texts)})
            texts.clear()

    for index, block in enumerate(blocks):
        block_where = f"{where}.content.{index}"
        kind = _block_type(block, block_where)
        if kind == "text":
            texts.append(_block_text(block, block_where))
        elif kind == "tool_result":
            tool_id = block.get("tool_use_id")
            if not isinstance(tool_id, str) or not tool_id:
                raise AnthropicRequestError("required, a non-empty string", f"{block_where}.tool_use_id")
            if tool_id not in expected_ids:
                raise AnthropicRequestError(
                    f"unexpected tool_use_id {tool_id!r} in tool_result: each tool_result block must have a "
                    "corresponding tool_use block in the previous message",
                    f"{block_where}.tool_use_id",
                )
            if tool_id in answered:
                raise AnthropicRequestError(
                    f"tool_use_id {tool_id!r} is answered twice", f"{block_where}.tool_use_id"
                )
            answered.add(tool_id)
            flush_text()
            out.append(
                {"role": "tool", "tool_call_id": tool_id, "content": _tool_result_text(block, block_where)}
            )
        elif kind == "tool_use":
            raise AnthropicRequestError(
                "tool_use blocks may only appear in assistant messages", f"{block_where}.type"
            )
        else:
            _refuse_block(kind, block_where)
    flush_text()
    return answered


def _translate_assistant(blocks: list, where: str, out: list[dict]) -> list[str]:
    texts: list[str] = []
    calls: list[dict] = []
    for index, block in enumerate(blocks):
        block_where = f"{where}.content.{index}"
        kind = _block_type(block, block_where)
        if kind == "text":
            texts.append(_block_text(block, block_where))
        elif kind == "tool_use":
            calls.append(_tool_use_to_call(block, block_where))
        elif kind in _DROPPED_BLOCK_TYPES:
            continue
        elif kind == "tool_result":
            raise AnthropicRequestError(
                "tool_result blocks may only appear in user messages", f"{block_where}.type"
            )
        else:
            _refuse_block(kind, block_where)
    message: dict = {"role": "assistant", "content": TEXT_JOIN.join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None:
        message["content"] = ""
    out.append(message)
    return [call["id"] for call in calls]


def _tool_use_to_call(block: dict, where: str) -> dict:
    tool_id, name, tool_input = block.get("id"), block.get("name"), block.get("input")
    if not isinstance(tool_id, str) or not tool_id:
        raise AnthropicRequestError("required, a non-empty string", f"{where}.id")
    if not isinstance(name, str) or not name:
        raise AnthropicRequestError("required, a non-empty string", f"{where}.name")
    if not isinstance(tool_input, dict):
        raise AnthropicRequestError("must be an object", f"{where}.input")
    return {
        "id": tool_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(tool_input, ensure_ascii=False)},
    }


def _tool_result_text(block: dict, where: str) -> str:
    content = block.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    elif isinstance(content, list):
        texts = []
        for index, part in enumerate(content):
            part_where = f"{where}.content.{index}"
            kind = _block_type(part, part_where)
            if kind != "text":
                _refuse_block(kind, part_where, inside="tool_result content")
            texts.append(_block_text(part, part_where))
        text = TEXT_JOIN.join(texts)
    else:
        raise AnthropicRequestError("must be a string or an array of text blocks", f"{where}.content")
    is_error = block.get("is_error", False)
    if is_error is not None and not isinstance(is_error, bool):
        raise AnthropicRequestError("must be a boolean", f"{where}.is_error")
    return TOOL_ERROR_PREFIX + text if is_error else text


def _block_type(block, where: str) -> str:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise AnthropicRequestError("a content block must be an object with a type", where)
    return block["type"]


def _block_text(block: dict, where: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise AnthropicRequestError("required, a string", f"{where}.text")
    return text


def _refuse_block(kind: str, where: str, *, inside: str = "messages") -> None:
    if kind in _UNSUPPORTED_BLOCK_TYPES:
        raise AnthropicRequestError(
            f"{kind} content blocks are not supported by this gateway (text only)", f"{where}.type"
        )
    raise AnthropicRequestError(f"content block type {kind!r} is not supported in {inside}", f"{where}.type")


def _translate_tools(tools) -> list[dict]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise AnthropicRequestError("must be an array of tools", "tools")
    out, names = [], set()
    for index, tool in enumerate(tools):
        where = f"tools.{index}"
        if not isinstance(tool, dict):
            raise AnthropicRequestError("must be an object", where)
        kind = tool.get("type")
        if kind not in (None, "custom"):
            raise AnthropicRequestError(
                f"tool type {kind!r} is not supported by this gateway (only client tools with an input_schema)",
                f"{where}.type",
            )
        name, description, schema = tool.get("name"), tool.get("description"), tool.get("input_schema")
        if not isinstance(name, str) or not name:
            raise AnthropicRequestError("required, a non-empty string", f"{where}.name")
        if name in names:
            raise AnthropicRequestError(f"tool names must be unique; {name!r} is repeated", f"{where}.name")
        names.add(name)
        if description is not None and not isinstance(description, str):
            raise AnthropicRequestError("must be a string", f"{where}.description")
        if not isinstance(schema, dict):
            raise AnthropicRequestError("required, a JSON Schema object", f"{where}.input_schema")
        function = {"name": name}
        if description is not None:
            function["description"] = description
        function["parameters"] = schema
        out.append({"type": "function", "function": function})
    return out


def _translate_tool_choice(choice, tools: list[dict]) -> dict:
    if choice is None:
        return {}
    if not isinstance(choice, dict) or not isinstance(choice.get("type"), str):
        raise AnthropicRequestError('must be an object such as {"type": "auto"}', "tool_choice")
    kind = choice["type"]
    if kind == "tool":
        name = choice.get("name")
        if not isinstance(name, str) or not name:
            raise AnthropicRequestError("required, a non-empty string", "tool_choice.name")
        if name not in {tool["function"]["name"] for tool in tools}:
            raise AnthropicRequestError(f"names a tool that is not in tools: {name!r}", "tool_choice.name")
        translated = {"type": "function", "function": {"name": name}}
    elif kind in _TOOL_CHOICES:
        translated = _TOOL_CHOICES[kind]
        if kind == "any" and not tools:
            raise AnthropicRequestError('"any" needs at least one tool', "tool_choice.type")
    else:
        raise AnthropicRequestError('must be "auto", "any", "tool" or "none"', "tool_choice.type")
    if not tools:
        return {}  # auto or none without tools: nothing to choose from, and OpenAI refuses a lone tool_choice
    out = {"tool_choice": translated}
    disable_parallel = choice.get("disable_parallel_tool_use")
    if disable_parallel is not None and not isinstance(disable_parallel, bool):
        raise AnthropicRequestError("must be a boolean", "tool_choice.disable_parallel_tool_use")
    if disable_parallel and kind != "none":
        out["parallel_tool_calls"] = False
    return out


def _stop_sequences(value) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise AnthropicRequestError("must be an array of non-empty strings", "stop_sequences")
    return list(value)


def _metadata_user(metadata) -> str | None:
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise AnthropicRequestError("must be an object", "metadata")
    user_id = metadata.get("user_id")
    if user_id is not None and not isinstance(user_id, str):
        raise AnthropicRequestError("must be a string", "metadata.user_id")
    return user_id or None


def is_int(value) -> bool:
    """An integer that is not a boolean (JSON's `true` is no count of tokens)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
