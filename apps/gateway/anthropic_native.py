"""`/v1/messages` forwarded natively to a backend of kind `anthropic` (the Anthropic Messages API, or a server
speaking it): the agent's request goes upstream as it came (the routed version's harness applied, `max_tokens`
the reserved cap), with the backend's credential as `x-api-key` and the client's `anthropic-version` (else
ANTHROPIC_VERSION) and `anthropic-beta` headers; the answer, whole or streamed event by event, goes back as the
upstream sent it, except that the message id is the step's (`msg_<step id>`) and routed tools are renamed back.

Nothing is translated to chat completions on the wire. For the step only, the answer is read into the
chat-completion shape the recording keeps (`message_to_chat`, `EventsToChatChunks`); the Messages API returns
no token ids or logprobs, so the step is text-only (recording.py). A backend's 401 or 403 is a 502
`backend_credential_refused` whose message does not repeat the upstream's.

Our own servers (embedded, vLLM) never get here: their `/v1/messages` is translated (anthropic_wire.py,
anthropic_response.py, anthropic_stream.py).
"""

import asyncio
import contextlib
import json
import time

from django.conf import settings

from apps.gateway.anthropic_stream import sse_encode
from apps.gateway.backend_http import BackendTransportFailed
from apps.gateway.errors import GatewayError
from apps.gateway.forward import BackendResponseTooLarge, backend_session, backend_url, encode
from apps.gateway.generation import (
    JSON_HEADERS,
    SSE_HEADERS,
    _backend_failure,
    _redirect_refused,
    _transport_failure,
    _watch_disconnect,
    post_whole,
)
from apps.gateway.providers import credential_refused
from apps.gateway.step_journal import record_step
from workers.evolution.harness import apply_to_request as harness_apply
from workers.evolution.harness import rewrite_chunk as harness_rewrite_chunk
from workers.evolution.harness import rewrite_response as harness_rewrite_response

ANTHROPIC_VERSION = "2023-06-01"
PASSED_HEADERS = (b"anthropic-version", b"anthropic-beta")
FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


# ---- reading the answer for the step (pure) -------------------------------------------------------------


def _count(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _usage(usage) -> dict:
    """Anthropic usage in the chat shape: every input token counted, cached or not."""
    usage = usage if isinstance(usage, dict) else {}
    prompt = sum(
        _count(usage.get(key))
        for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )
    return {"prompt_tokens": prompt, "completion_tokens": _count(usage.get("output_tokens"))}


def _tool_call(block: dict) -> dict:
    tool_input = block.get("input")
    return {
        "id": block.get("id"),
        "type": "function",
        "function": {
            "name": block.get("name") or "",
            "arguments": json.dumps(tool_input, ensure_ascii=False) if tool_input else "",
        },
    }


def message_to_chat(message: dict) -> dict:
    """An Anthropic `message` as the chat completion the step records: text blocks joined, tool_use blocks as
    tool calls (input as a JSON string), stop_reason as finish_reason, usage in tokens."""
    blocks = [block for block in message.get("content") or [] if isinstance(block, dict)]
    text = "".join(block.get("text") or "" for block in blocks if block.get("type") == "text")
    calls = [_tool_call(block) for block in blocks if block.get("type") == "tool_use"]
    return {
        "id": message.get("id"),
        "object": "chat.completion",
        "model": message.get("model"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "tool_calls": calls or None},
                "finish_reason": FINISH_REASONS.get(message.get("stop_reason"), "stop"),
            }
        ],
        "usage": _usage(message.get("usage")),
    }


class EventsToChatChunks:
    """Anthropic stream events, one at a time, as the chat-completion chunks the step records (None for an
    event that adds nothing: pings, block stops, thinking)."""

    def __init__(self):
        self.usage: dict = {}
        self._tool_positions: dict[int, int] = {}  # content block index → tool call position

    def feed(self, event: str, data: dict) -> dict | None:
        if event == "message_start":
            message = data.get("message") or {}
            self.usage = dict(message.get("usage") or {})
            return {"id": message.get("id"), "model": message.get("model"), "choices": []}
        if event == "content_block_start":
            block = data.get("content_block") or {}
            if block.get("type") == "tool_use":
                position = self._tool_positions.setdefault(data.get("index", 0), len(self._tool_positions))
                return _delta({"tool_calls": [{"index": position, **_tool_call(block)}]})
            if block.get("type") == "text" and block.get("text"):
                return _delta({"content": block["text"]})
            return None
        if event == "content_block_delta":
            delta = data.get("delta") or {}
            if delta.get("type") == "text_delta":
                return _delta({"content": delta.get("text") or ""})
            if delta.get("type") == "input_json_delta":
                position = self._tool_positions.get(data.get("index", 0), 0)
                fragment = {"index": position, "function": {"arguments": delta.get("partial_json") or ""}}
                return _delta({"tool_calls": [fragment]})
            return None
        if event == "message_delta":
            self.usage.update({key: value for key, value in (data.get("usage") or {}).items() if value})
            stop_reason = (data.get("delta") or {}).get("stop_reason")
            chunk = _delta({}, finish_reason=FINISH_REASONS.get(stop_reason, "stop") if stop_reason else None)
            chunk["usage"] = _usage(self.usage)
            return chunk
        return None


def _delta(delta: dict, *, finish_reason: str | None = None) -> dict:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}


def _upstream_error(raw: bytes) -> str:
    try:
        error = json.loads(raw).get("error") or {}
        return str(error.get("message") or "")[:300] or raw.decode("utf-8", "replace")[:300]
    except (ValueError, AttributeError):
        return raw.decode("utf-8", "replace")[:300]


# ---- forwarding ----------------------------------------------------------------------------------------


def upstream_request(body: dict, *, harness, max_tokens: int, client_headers: dict, profile) -> tuple:
    """(body, headers) sent upstream: the agent's body with the harness applied and the reserved cap; the
    credential's headers with the client's `anthropic-version` and `anthropic-beta` passed on."""
    native = harness_apply(body, harness, wire="anthropic") if harness is not None else dict(body)
    native["max_tokens"] = max_tokens
    headers = dict(profile.headers)
    headers.setdefault("anthropic-version", ANTHROPIC_VERSION)
    for name in PASSED_HEADERS:
        value = client_headers.get(name)
        if value:
            headers[name.decode()] = value.decode("latin-1")
    return native, headers


async def forward_messages(
    gateway, receive, send, draft, *, backend, profile, body, client_headers, harness, started, max_tokens
) -> float:
    """Forwards one `/v1/messages` call natively and returns its cost; the step is journalled before the
    answer (or, streaming, its final event) is released."""
    native, headers = upstream_request(
        body, harness=harness, max_tokens=max_tokens, client_headers=client_headers, profile=profile
    )
    url = backend_url(backend.base_url, "/v1/messages")  # refused before any connection unless allowed
    if native.get("stream"):
        return await _stream(gateway, receive, send, draft, url, native, headers, started, harness)
    return await _unary(gateway, send, draft, url, native, headers, started, harness)


async def _refusal(gateway, draft, status: int, raw: bytes) -> GatewayError:
    refused = credential_refused(status)
    if refused is not None:
        return await _backend_failure(gateway, draft, 502, refused, "backend_credential_refused")
    detail = _upstream_error(raw)
    if status == 429:
        return GatewayError(429, f"the backend is rate limiting: {detail}", "backend_rate_limited")
    if status < 500:
        return GatewayError(
            status if status in {400, 404, 413, 422} else 400,
            f"the backend refused the request: {detail}",
            "backend_rejected",
        )
    return await _backend_failure(gateway, draft, 502, f"the inference backend answered {status}: {detail}")


async def _unary(gateway, send, draft, url, native, headers, started, harness) -> float:
    status, raw = await post_whole(gateway, draft, url, encode(native), headers)
    if status >= 400:
        raise await _refusal(gateway, draft, status, raw)
    try:
        payload = json.loads(raw)
        recorded = message_to_chat(payload)
    except (ValueError, AttributeError, TypeError):
        raise await _backend_failure(
            gateway, draft, 502, "the inference backend answered with a malformed message"
        ) from None
    draft.complete_unary(recorded, latency_ms=(time.perf_counter() - started) * 1000)
    await draft.sanitize_response()
    record_step(gateway, draft)
    payload["id"] = draft.response_id(anthropic=True)
    if harness is not None:  # the agent receives calls to routed tools under their targets' names
        payload = harness_rewrite_response(payload, harness)
        draft.agent_reply(harness)
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": JSON_HEADERS + [(b"x-session-id", draft.session_id.encode())],
        }
    )
    await send({"type": "http.response.body", "body": json.dumps(payload, separators=(",", ":")).encode()})
    return draft.cost_usd


async def _stream(gateway, receive, send, draft, url, native, headers, started, harness) -> float:
    disconnected = asyncio.Event()
    watcher = asyncio.get_running_loop().create_task(_watch_disconnect(receive, disconnected))
    reader = EventsToChatChunks()
    held_back: bytes = b""  # message_stop: released once the step is journalled
    headers_sent = False
    try:
        async with backend_session().post(url, data=encode(native), headers=headers) as response:
            if 300 <= response.status < 400:
                raise await _backend_failure(gateway, draft, 502, _redirect_refused(response.status))
            if response.status >= 400:
                raise await _refusal(gateway, draft, response.status, await response.content.read(4096))
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": SSE_HEADERS + [(b"x-session-id", draft.session_id.encode())],
                }
            )
            headers_sent = True
            event, received, limit = "", 0, settings.AREAL_GATEWAY_MAX_RESPONSE_BYTES
            async for raw_line in response.content:
                received += len(raw_line)
                if received > limit:
                    draft.abort(str(BackendResponseTooLarge(limit)))
                    break
                if disconnected.is_set():
                    draft.abort("client disconnected mid-stream")
                    break
                line = raw_line.decode("utf-8", "replace").rstrip("\r\n")
                if line.startswith("event:"):
                    event = line[6:].strip()
                    continue
                if not line.startswith("data:"):
                    continue
                try:
                    data = json.loads(line[5:].strip())
                except ValueError:
                    draft.abort("the backend sent a malformed event mid-stream")
                    break
                event = event or data.get("type", "")
                chunk = reader.feed(event, data)
                if chunk is not None:
                    draft.add_chunk(chunk, elapsed_ms=(time.perf_counter() - started) * 1000)
                if event == "message_start" and isinstance(data.get("message"), dict):
                    data["message"]["id"] = draft.response_id(anthropic=True)
                elif event == "error":
                    draft.abort(f"the backend sent an error mid-stream: {_upstream_error(line[5:].encode())}")
                data = harness_rewrite_chunk(data, harness)  # a new dict: the step keeps the model's names
                out = sse_encode(event, data)
                if event == "message_stop":
                    held_back = out
                    break
                try:
                    await send({"type": "http.response.body", "body": out, "more_body": True})
                except Exception:
                    draft.abort("client disconnected mid-stream")
                    break
                event = ""
    except TimeoutError:
        if not headers_sent:
            raise await _backend_failure(gateway, draft, 504, "the inference backend timed out") from None
        draft.abort("the inference backend timed out mid-stream")
    except BackendTransportFailed as error:
        if not headers_sent:
            raise await _backend_failure(gateway, draft, 502, _transport_failure(error)) from None
        draft.abort(f"{_transport_failure(error)} mid-stream")
    finally:
        watcher.cancel()
    if not held_back and not draft.aborted:
        draft.abort("the backend's stream ended without message_stop")
    draft.finish_stream(latency_ms=(time.perf_counter() - started) * 1000)
    await draft.sanitize_response()
    record_step(gateway, draft, delivered=True)  # journalled before the final event is released
    if harness is not None:
        draft.agent_reply(harness)
    with contextlib.suppress(Exception):
        await send({"type": "http.response.body", "body": held_back, "more_body": False})
    return draft.cost_usd
