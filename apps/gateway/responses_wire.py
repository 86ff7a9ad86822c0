"""OpenAI's Responses API <-> chat completions, as pure functions over dicts (no I/O, no Django).

The gateway serves `POST /v1/responses` by translating it to the chat path every backend speaks (the
embedded server, vLLM), so a Responses turn is recorded as an ATDP step with the backend's token ids and
logprobs like any chat call. `responses_stream.py` does the same for the event stream.

Request rules (`responses_request_to_chat`):
- `instructions` becomes a leading system message (this request's only: a continued response's
  instructions are not carried over, as OpenAI does); `input` is a string (one user message) or items:
  messages (`type: message` or bare `{role, content}`; `developer` is a system message; content a string
  or `input_text` / `output_text` / `refusal` parts, joined with nothing between them), `function_call`
  items (the assistant's `tool_calls`, id = `call_id`), `function_call_output` items (`role: tool`
  messages), `reasoning` items (accepted and not forwarded: a chat backend has no field for them).
  Assistant messages and function calls that follow each other are one chat assistant message, so the
  turn the gateway answered comes back as the message it recorded (message-prefix attribution).
  Images, files, audio, item references and hosted tools are refused (400, the field named).
- `tools`: function tools only (`{type: function, name, description, parameters}`; `strict` is not
  forwarded: the chat template renders the whole tool into the prompt);
  `tool_choice` auto / none / required / `{type: function, name}`; `parallel_tool_calls`;
  `max_output_tokens` -> `max_tokens`; `temperature`, `top_p`; `text.format` json_schema / json_object ->
  `response_format`; `user` (or `safety_identifier`) -> `user`; `stream`.
- `background` and `conversation` are refused; other Responses fields (`include`, `reasoning`,
  `truncation`, `metadata`, `service_tier`, `prompt_cache_key`, ...) are accepted and echoed where the
  response object has them.

Response rules (`chat_response_to_response`): the first choice's text is one `message` item with one
`output_text` part, each tool call a `function_call` item (`call_id` the chat call's id); `finish_reason`
length -> status `incomplete` (`max_output_tokens`), content_filter -> `incomplete` (`content_filter`).
"""

import json
import time
import uuid

RESPONSE_PREFIX = "resp_"
_TEXT_PARTS = {"input_text", "output_text", "text"}
_REFUSED_PARTS = {"input_image", "input_file", "input_audio"}
_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
_TOOL_CHOICES = {"auto", "none", "required"}


class ResponsesRequestError(ValueError):
    """An invalid Responses request: a 400 `invalid_request` naming `field`."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field


def new_item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


# ---- request ---------------------------------------------------------------------------------------------


def responses_request_to_chat(body: dict, *, history: list[dict] | None = None) -> tuple[dict, list[dict]]:
    """(the chat-completions body, the conversation it carries without the instructions): `history` is the
    conversation of the response this one continues (`previous_response_id`), its reply included."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ResponsesRequestError("required, a non-empty string", "model")
    for refused in ("background", "conversation", "prompt"):
        if body.get(refused):
            raise ResponsesRequestError("is not supported by this gateway", refused)
    conversation = list(history or []) + input_to_messages(body.get("input"))
    messages = list(conversation)
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise ResponsesRequestError("must be a string", "instructions")
        if instructions:
            messages.insert(0, {"role": "system", "content": instructions})
    chat: dict = {"model": model, "messages": messages}
    tools = _tools(body.get("tools"))
    if tools:
        chat["tools"] = tools
        choice = _tool_choice(body.get("tool_choice"), tools)
        if choice is not None:
            chat["tool_choice"] = choice
        parallel = body.get("parallel_tool_calls")
        if parallel is not None:
            if not isinstance(parallel, bool):
                raise ResponsesRequestError("must be a boolean", "parallel_tool_calls")
            chat["parallel_tool_calls"] = parallel
    cap = body.get("max_output_tokens")
    if cap is not None:
        chat["max_tokens"] = cap  # validated with the chat body (validation.py)
    for name in ("temperature", "top_p"):
        if body.get(name) is not None:
            chat[name] = body[name]
    response_format = _response_format(body.get("text"))
    if response_format is not None:
        chat["response_format"] = response_format
    user = body.get("user") or body.get("safety_identifier")
    if isinstance(user, str) and user:
        chat["user"] = user
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise ResponsesRequestError("must be a boolean", "stream")
    chat["stream"] = bool(stream)
    return chat, conversation


def input_to_messages(value) -> list[dict]:
    """The chat messages of a Responses `input` (a string or a list of items)."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise ResponsesRequestError("must be a string or a non-empty array of items", "input")
    out: list[dict] = []
    assistant: dict | None = None  # the assistant message being assembled from consecutive items
    for index, item in enumerate(value):
        where = f"input.{index}"
        if not isinstance(item, dict):
            raise ResponsesRequestError("must be an object", where)
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            role = _ROLES.get(item.get("role"))
            if role is None:
                raise ResponsesRequestError(
                    'must be "user", "system", "developer" or "assistant"', f"{where}.role"
                )
            text = _content_text(item.get("content"), f"{where}.content")
            if role == "assistant":
                if assistant is None or assistant.get("tool_calls"):
                    assistant = {"role": "assistant", "content": ""}
                    out.append(assistant)
                assistant["content"] += text
                continue
            out.append({"role": role, "content": text})
        elif kind == "function_call":
            call_id, name = _string(item, "call_id", where), _string(item, "name", where)
            arguments = item.get("arguments", "")
            if not isinstance(arguments, str):
                raise ResponsesRequestError("must be a string of JSON", f"{where}.arguments")
            if assistant is None:
                assistant = {"role": "assistant", "content": ""}
                out.append(assistant)
            assistant.setdefault("tool_calls", []).append(
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            )
            continue
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else _content_text(output, f"{where}.output")
            out.append({"role": "tool", "tool_call_id": _string(item, "call_id", where), "content": text})
        elif kind == "reasoning":
            continue  # a chat backend has no field for it; it does not end the assistant's turn
        elif kind == "item_reference":
            raise ResponsesRequestError("item references are not supported: send the item", f"{where}.type")
        else:
            raise ResponsesRequestError(f"input items of type {kind!r} are not supported", f"{where}.type")
        assistant = None
    for message in out:
        if message["role"] == "assistant" and message.get("tool_calls") and not message["content"]:
            message["content"] = None
    return out


def _content_text(content, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ResponsesRequestError("must be a string or an array of content parts", where)
    texts = []
    for index, part in enumerate(content):
        part_where = f"{where}.{index}"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
        elif kind in _REFUSED_PARTS:
            raise ResponsesRequestError(
                f"{kind} parts are not supported by this gateway (text only)", part_where
            )
        else:
            raise ResponsesRequestError("must be a text part ({type: input_text, text})", part_where)
    return "".join(texts)


def _string(item: dict, name: str, where: str) -> str:
    value = item.get(name)
    if not isinstance(value, str) or not value:
        raise ResponsesRequestError("required, a non-empty string", f"{where}.{name}")
    return value


def _tools(tools) -> list[dict]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise ResponsesRequestError("must be an array of tools", "tools")
    out = []
    for index, tool in enumerate(tools):
        where = f"tools.{index}"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise ResponsesRequestError("only function tools are supported by this gateway", f"{where}.type")
        function = {"name": _string(tool, "name", where)}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        parameters = tool.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise ResponsesRequestError("must be a JSON schema object", f"{where}.parameters")
        function["parameters"] = parameters or {"type": "object", "properties": {}}
        # `strict` is not forwarded: a chat template renders the whole tool, so the prompt would depend on it
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice, tools: list[dict]):
    if choice is None or choice in _TOOL_CHOICES:
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        name = choice.get("name")
        if name not in {tool["function"]["name"] for tool in tools}:
            raise ResponsesRequestError(f"names a tool that is not in tools: {name!r}", "tool_choice.name")
        return {"type": "function", "function": {"name": name}}
    raise ResponsesRequestError(
        'must be "auto", "none", "required" or {"type": "function", "name"}', "tool_choice"
    )


def _response_format(text) -> dict | None:
    if text is None:
        return None
    if not isinstance(text, dict):
        raise ResponsesRequestError("must be an object", "text")
    form = text.get("format")
    if not isinstance(form, dict) or form.get("type") in (None, "text"):
        return None
    if form["type"] == "json_object":
        return {"type": "json_object"}
    if form["type"] == "json_schema":
        schema = {"name": form.get("name") or "output", "schema": form.get("schema") or {}}
        if isinstance(form.get("strict"), bool):
            schema["strict"] = form["strict"]
        return {"type": "json_schema", "json_schema": schema}
    raise ResponsesRequestError('must be "text", "json_object" or "json_schema"', "text.format.type")


# ---- response ----------------------------------------------------------------------------------------------


def response_skeleton(body: dict, *, response_id: str, store: bool) -> dict:
    """The response object before any output: what the request asked for, echoed as OpenAI echoes it."""
    text = body.get("text") if isinstance(body.get("text"), dict) else {"format": {"type": "text"}}
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": "in_progress",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": body.get("model"),
        "output": [],
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
        "store": store,
        "temperature": body.get("temperature"),
        "text": text,
        "tool_choice": body.get("tool_choice") or "auto",
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p"),
        "truncation": body.get("truncation") or "disabled",
        "usage": None,
        "user": body.get("user"),
        "metadata": body.get("metadata") or {},
    }


def message_item(text: str, *, item_id: str | None = None, status: str = "completed") -> dict:
    return {
        "id": item_id or new_item_id("msg"),
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
        if status == "completed"
        else [],
    }


def function_call_item(
    call_id, name, arguments: str, *, item_id: str | None = None, status="completed"
) -> dict:
    return {
        "id": item_id or new_item_id("fc"),
        "type": "function_call",
        "status": status,
        "call_id": call_id or new_item_id("call"),
        "name": name or "",
        "arguments": arguments,
    }


def usage(chat_usage, prompt_ids: int, completion_ids: int) -> dict:
    chat_usage = chat_usage if isinstance(chat_usage, dict) else {}
    prompt = chat_usage.get("prompt_tokens")
    completion = chat_usage.get("completion_tokens")
    prompt = prompt if isinstance(prompt, int) else prompt_ids
    completion = completion if isinstance(completion, int) else completion_ids
    details = chat_usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached if isinstance(cached, int) else 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }


def finish(response: dict, *, output: list[dict], finish_reason, usage_: dict) -> dict:
    """The response object completed (or incomplete) with its output and usage."""
    status, details = "completed", None
    if finish_reason == "length":
        status, details = "incomplete", {"reason": "max_output_tokens"}
    elif finish_reason == "content_filter":
        status, details = "incomplete", {"reason": "content_filter"}
    return {**response, "status": status, "incomplete_details": details, "output": output, "usage": usage_}


def chat_response_to_response(chat: dict, response: dict) -> dict:
    """A non-streaming chat.completion body as the finished response object (first choice only)."""
    choices = chat.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    output = []
    text = message.get("content") if isinstance(message.get("content"), str) else ""
    calls = message.get("tool_calls") or []
    if text or not calls:  # an empty answer is still a message: the agent sends it back as history
        output.append(message_item(text))
    for call in calls:
        function = call.get("function") or {}
        arguments = function.get("arguments")
        arguments = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
        output.append(function_call_item(call.get("id"), function.get("name"), arguments))
    return finish(
        response,
        output=output,
        finish_reason=choice.get("finish_reason"),
        usage_=usage(
            chat.get("usage"), len(chat.get("prompt_token_ids") or []), len(choice.get("token_ids") or [])
        ),
    )
