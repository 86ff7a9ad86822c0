"""A chat completion as an Anthropic Messages `message` (pure, no I/O, no Django); the request side is
`anthropic_wire.py`, the event stream `anthropic_stream.py`, which shares the rules here.

Rules (`chat_response_to_message`, and `anthropic_stream.ChatStreamToMessageEvents` alike): content becomes a
text block, each tool call a `tool_use` block with its parsed `input` (arguments that are not a JSON object
become a text block instead, so the client never sees a broken tool call); `finish_reason` length ->
`max_tokens`, any valid tool call -> `tool_use`, a stop string reported by the backend (vLLM's `stop_reason`)
-> `stop_sequence`, content_filter -> `refusal`, otherwise `end_turn`.
"""

import json
import uuid

from apps.gateway.anthropic_wire import is_int


def new_message_id() -> str:
    return f"msg_{uuid.uuid4().hex}"


def new_tool_use_id() -> str:
    return f"toolu_{uuid.uuid4().hex}"


def chat_response_to_message(
    chat: dict, *, model: str, message_id: str | None = None, stop_sequences: list[str] | None = None
) -> dict:
    """A non-streaming chat.completion body as an Anthropic `message`. Only the first choice is used.

    `stop_sequences`, when given, limits which backend-reported stop strings count as a `stop_sequence`."""
    choices = chat.get("choices") if isinstance(chat, dict) else None
    if not choices or not isinstance(choices[0], dict):
        raise ValueError("the chat completion has no choices")
    choice = choices[0]
    message = choice.get("message") or {}
    content = []
    text = _message_text(message.get("content"))
    if text:
        content.append({"type": "text", "text": text})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        content.append(tool_call_block(call.get("id"), function.get("name"), function.get("arguments")))
    has_tool_use = any(block["type"] == "tool_use" for block in content)
    stop_reason, stop_sequence = message_stop_reason(
        choice.get("finish_reason"), choice.get("stop_reason"), has_tool_use, stop_sequences
    )
    return {
        "id": message_id or new_message_id(),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": message_usage(
            chat.get("usage"), len(chat.get("prompt_token_ids") or []), len(choice.get("token_ids") or [])
        ),
    }


def _message_text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def tool_call_block(call_id, name, arguments) -> dict:
    """A tool call as a tool_use block, or as a text block when it is not a named call with an object."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments if arguments is not None else {})
    try:
        parsed = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(name, str) and name:
        return {"type": "tool_use", "id": call_id or new_tool_use_id(), "name": name, "input": parsed}
    return {"type": "text", "text": json.dumps({"name": name, "arguments": raw}, ensure_ascii=False)}


def message_stop_reason(
    finish_reason, backend_stop_reason, has_tool_use: bool, stop_sequences: list[str] | None
) -> tuple[str, str | None]:
    if finish_reason == "length":
        return "max_tokens", None
    if has_tool_use:
        return "tool_use", None
    if finish_reason == "content_filter":
        return "refusal", None
    if (
        finish_reason == "stop"
        and isinstance(backend_stop_reason, str)
        and backend_stop_reason
        and (stop_sequences is None or backend_stop_reason in stop_sequences)
    ):
        return "stop_sequence", backend_stop_reason
    return "end_turn", None


def message_usage(usage, prompt_ids: int, completion_ids: int) -> dict:
    usage = usage if isinstance(usage, dict) else {}
    prompt = usage.get("prompt_tokens")
    completion = usage.get("completion_tokens")
    prompt = prompt if is_int(prompt) else prompt_ids
    completion = completion if is_int(completion) else completion_ids
    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    cached = cached if is_int(cached) and 0 <= cached <= prompt else 0
    return {
        "input_tokens": prompt - cached,
        "output_tokens": completion,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
    }
