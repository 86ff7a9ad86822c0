"""Handling of one generation request (/v1/chat/completions, /v1/completions, /v1/messages and their
per-session and un-prefixed forms): parse and validate (Anthropic's Messages translated to chat), policy
(model, PII block, rate limits, budget reservation), session attribution and routing through the `Gateway`
(asgi_app.py), the forward with token ids and logprobs, the answer returned whole or relayed as a stream
(translated back to Anthropic's events on /v1/messages), the step recorded (recording.py) and handed to the
journal (step_journal.py) before the answer is released, and the budget settled. With `X-Session-End: true` the step is flushed to
the database and the session's trajectory ended (reason `signal`) before the answer is released.
"""

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

from django.conf import settings

from apps.gateway import anthropic_response, anthropic_stream, anthropic_wire, caps, validation, wire_json
from apps.gateway.backend_http import BackendConnectFailed, BackendTransportFailed
from apps.gateway.db import database
from apps.gateway.errors import GatewayError
from apps.gateway.forward import (
    JSON_CONTENT,
    BackendResponseTooLarge,
    backend_session,
    backend_url,
    encode,
    read_capped,
)
from apps.gateway.policy import budget_reserve, budget_settle, policy_for
from apps.gateway.providers import add_token_parameters, credential_refused, forwarding_profile
from apps.gateway.recording import StepDraft
from apps.gateway.step_journal import journal_check, record_step, session_share
from apps.gateway.versions import derive_token_versions
from workers.evolution.harness import apply_to_request as harness_apply
from workers.evolution.harness import rewrite_chunk as harness_rewrite_chunk
from workers.evolution.harness import rewrite_response as harness_rewrite_response
from workers.evolution.harness import tool_versions as harness_tool_versions

if TYPE_CHECKING:
    from apps.gateway.asgi_app import Gateway

logger = logging.getLogger(__name__)

JSON_HEADERS = [(b"content-type", b"application/json")]
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


def _end_signalled_session(tenant_id: int, session_id: str) -> None:
    from apps.trajectories.lifecycle import session_end_by_signal

    session_end_by_signal(tenant_id=tenant_id, session_id=session_id)


async def _end_session_after_step(gateway, draft) -> None:
    """The agent's end signal: the journal is flushed (the step is in the database), then the session's
    trajectory is ended, before the answer is released. When that fails the answer still goes out; the
    session is then closed by the tenant's idle timeout."""
    if not draft.recorded:
        return
    try:
        await gateway.journal.flush()
        await database(_end_signalled_session)(draft.principal.tenant_id, draft.session_id)
    except Exception:
        logger.exception("X-Session-End: session %s could not be ended now", draft.session_id)


def _estimate_prompt_tokens(body: dict) -> int:
    return max(1, len(wire_json.dumps(body.get("messages") or body.get("prompt") or "")) // 3)


async def handle_generation(
    gateway: "Gateway", scope, receive, send, headers, session_from_path, *, endpoint: str, wire_class=None
):
    """`wire_class`: a client wire translated to chat and back (responses.ResponsesWire: `begin`, `chat_body`,
    `session_id`, `answer`, `stream_feed`, `stream_finish`, `stream_fail`); the rest of the path is chat's."""
    started = time.perf_counter()
    principal, _ = await gateway.authorize(headers, "inference")
    body = await gateway.read_json(receive)
    anthropic = endpoint == "messages"
    wire = None
    if wire_class is not None:
        wire = await wire_class.begin(principal, body)
        chat_body = wire.chat_body
        validation.validate_chat(chat_body)
        client_model = body.get("model")
        session_from_path = session_from_path or wire.session_id  # a continued response's session
    elif anthropic:
        try:
            chat_body = anthropic_wire.messages_request_to_chat(body)
        except anthropic_wire.AnthropicRequestError as error:
            raise GatewayError(
                400, str(error), "invalid_request", field=getattr(error, "field", None)
            ) from None
        validation.validate_chat(chat_body)
        client_model = body.get("model")
    else:
        (validation.validate_chat if endpoint == "chat" else validation.validate_completion)(body)
        chat_body = body
        client_model = body["model"]
    model = chat_body["model"]
    policy = await policy_for(principal.tenant_id)
    if not policy.allows(model):
        raise GatewayError(403, f"the model {model!r} is not allowed for this tenant", "model_not_allowed")
    messages = chat_body.get("messages") if endpoint != "completions" else None
    draft = StepDraft.begin(
        principal=principal, policy=policy, endpoint=endpoint, request=chat_body, headers=headers
    )
    await draft.sanitize_request()  # raises 422 under PII mode `block`; off the event loop when large
    journal_check(gateway, draft)  # 503 before forwarding when the step could not be journalled
    max_tokens = caps.reserved_cap(chat_body)  # per choice; forwarded as the cap (apps/gateway/caps.py)
    estimated_prompt = _estimate_prompt_tokens(chat_body)
    n = chat_body.get("n", 1)
    await gateway.counters.reserve(
        tenant_id=principal.tenant_id, kind="rpm", amount=1, limit=policy.rate_limit_rpm
    )
    await gateway.counters.reserve(
        tenant_id=principal.tenant_id,
        kind="tpm",
        amount=estimated_prompt + max_tokens * n,
        limit=policy.rate_limit_tpm,
    )
    reserved = await budget_reserve(policy, policy.price(model, estimated_prompt, max_tokens * n))
    actual_cost = 0.0
    try:
        state, hashes, minted, loose_prompt_hash = await gateway.attribute_session(
            principal, headers, session_from_path, messages
        )
        if state.ended:
            raise GatewayError(410, f"session {state.session_id} has ended", "session_ended")
        backend = await gateway.route(principal, model, state, minted=minted)
        # its credential and capability flags (providers.py); refused here when it cannot serve this call
        profile = await forwarding_profile(backend, endpoint=endpoint, model=model)
        draft.attach(
            session=state, prompt_hash=hashes[-1] if hashes else None, backend=backend, version=state.version
        )
        draft.loose_prompt_hash = loose_prompt_hash
        draft.backend_profile = profile
        harness = None
        if endpoint != "completions":  # a raw prompt has no system message or tools to apply a harness to
            serving = await gateway.serving(principal.tenant_id, model, state.version)
            harness = serving.harness_for(draft.agent_name)  # only the harness of this request's agent
            if harness is not None:
                harness = harness.for_request(chat_body.get("tools"))  # routes to tools the agent offers
        model_body = chat_body
        if harness is not None:
            model_body = harness_apply(chat_body, harness, wire="chat")  # Anthropic's was translated to chat
            await draft.apply_harness(
                request=model_body,
                label=harness.label,
                tool_versions=harness_tool_versions(harness, chat_body.get("tools")),
            )
        forward_body = dict(model_body)
        await caps.apply_cap(
            forward_body, reserved=max_tokens, backend=backend, endpoint=endpoint, profile=profile
        )
        add_token_parameters(forward_body, endpoint=endpoint, profile=profile)  # only what it accepts
        path = "/v1/completions" if endpoint == "completions" else "/v1/chat/completions"
        url = backend_url(backend.base_url, path)  # refused before any connection unless allowed (egress.py)
        draft.forwarded_at = time.time()  # per-token versions of answers that carry none (versions.py)
        if profile.anthropic:  # an Anthropic Messages API upstream: /v1/messages forwarded as it came
            from apps.gateway.anthropic_native import forward_messages  # it uses this module's helpers

            actual_cost = await forward_messages(
                gateway,
                receive,
                send,
                draft,
                backend=backend,
                profile=profile,
                body=body,
                client_headers=headers,
                harness=harness,
                started=started,
                max_tokens=max_tokens,
            )
        elif chat_body.get("stream"):
            actual_cost = await _stream(
                gateway,
                receive,
                send,
                draft,
                url,
                forward_body,
                started,
                anthropic,
                client_model,
                harness,
                wire,
            )
        else:
            actual_cost = await _unary(
                gateway, send, draft, url, forward_body, started, anthropic, client_model, harness, wire
            )
    finally:
        await budget_settle(policy, reserved, actual_cost or draft.cost_usd)  # a 503'd answer's compute too


async def _backend_failure(gateway, draft, error_status: int, message: str, code: str | None = None):
    draft.fail(message)
    record_step(gateway, draft)
    await session_share(gateway, draft)  # a retry of the failed call, on any process, is one
    code = code or ("backend_timeout" if error_status == 504 else "backend_error")
    return GatewayError(error_status, message, code)


BACKEND_CODES_KEPT = {"context_length_exceeded"}  # OpenAI's own code, which frameworks act on


async def _backend_refusal(gateway, draft, status: int, raw: bytes) -> GatewayError:
    """A backend's error answer as the gateway's, the same whether the request streamed or not: a 4xx is the
    client's (its status kept where it is 400, 404, 413 or 422; the backend's message, not its body, in
    ours; its code kept where it is OpenAI's `context_length_exceeded`), a 5xx fails the step with a 502."""
    text = raw.decode("utf-8", "replace")
    error: dict = {}
    try:
        parsed = wire_json.loads(raw)
        error = parsed.get("error") if isinstance(parsed.get("error"), dict) else {}
    except (ValueError, AttributeError):
        pass
    detail = error.get("message") if isinstance(error.get("message"), str) else text
    if status < 500:
        code = error.get("code") if error.get("code") in BACKEND_CODES_KEPT else "backend_rejected"
        param = error.get("param") if isinstance(error.get("param"), str) else None
        return GatewayError(
            status if status in {400, 404, 413, 422} else 400,
            f"the backend refused the request: {detail[:2000]}",
            code,
            field=param,
        )
    return await _backend_failure(
        gateway, draft, 502, f"the inference backend answered {status}: {detail[:200]}"
    )


def _stream_error(draft, error: dict, translator, wire) -> bytes:
    """A backend's error event mid-stream (`data: {"error": {...}}`): the step is aborted, and the client gets
    the error as one JSON object in its own wire (OpenAI's error object, Anthropic's error event, Responses'
    `error` and `response.failed`), not the backend's text inside a string."""
    message = (
        error.get("message") if isinstance(error.get("message"), str) else "the inference backend failed"
    )
    draft.abort(f"the inference backend failed mid-stream: {message}"[:500])
    draft.stream_error_sent = True
    if translator is not None:
        return b"".join(
            anthropic_stream.sse_encode(event, body) for event, body in translator.feed({"error": error})
        )
    if wire is not None:
        return wire.stream_fail(draft, message, "backend_error")
    body = GatewayError(502, message, "backend_error").openai_body()
    return b"data: " + body + b"\n\n"


def _headers(draft) -> dict:
    """Content-Type and the backend's credential (providers.py)."""
    return draft.backend_profile.headers if draft.backend_profile is not None else JSON_CONTENT


def _redirect_refused(status: int) -> str:
    return f"the inference backend answered a redirect ({status}), which the gateway does not follow"


def _transport_failure(error) -> str:
    if isinstance(error, BackendConnectFailed):
        return "could not connect to the inference backend (ConnectError)"
    return f"the inference backend failed: {error}"


async def _unary(
    gateway, send, draft, url, forward_body, started, anthropic, client_model, harness=None, wire=None
) -> float:
    status, raw = await post_whole(gateway, draft, url, encode(forward_body), _headers(draft))
    if credential_refused(status):
        raise await _backend_failure(
            gateway, draft, 502, credential_refused(status), "backend_credential_refused"
        )
    if status >= 400:
        raise await _backend_refusal(gateway, draft, status, raw)
    try:
        payload = wire_json.loads(raw)
    except ValueError:
        raise await _backend_failure(
            gateway, draft, 502, "the inference backend answered with malformed JSON"
        ) from None
    draft.complete_unary(payload, latency_ms=(time.perf_counter() - started) * 1000)
    payload["id"] = draft.response_id()
    await derive_token_versions(draft, gateway.served_versions)
    await draft.sanitize_response()
    record_step(gateway, draft)  # the action as the model produced it
    if draft.end_session:
        await _end_session_after_step(gateway, draft)
    if harness is not None:  # the agent receives calls to routed tools under their targets' names
        payload = harness_rewrite_response(payload, harness)
        draft.agent_reply(harness)
    if anthropic:
        payload = anthropic_response.chat_response_to_message(payload, model=client_model)
        payload["id"] = draft.response_id(anthropic=True)
    if wire is not None:  # a response object, stored first when it is to be kept (responses.py)
        payload = await wire.answer(draft, payload)
    data = wire_json.dumps(payload)
    await session_share(gateway, draft)  # before the answer: the agent's next turn may go to another process
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": JSON_HEADERS + [(b"x-session-id", draft.session_id.encode())],
        }
    )
    await send({"type": "http.response.body", "body": data})
    return draft.cost_usd


async def _watch_disconnect(receive, flag: asyncio.Event):
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            flag.set()
            return


async def _stream(
    gateway,
    receive,
    send,
    draft,
    url,
    forward_body,
    started,
    anthropic,
    client_model,
    harness=None,
    wire=None,
) -> float:
    disconnected = asyncio.Event()
    watcher = asyncio.get_running_loop().create_task(_watch_disconnect(receive, disconnected))
    translator = (
        anthropic_stream.ChatStreamToMessageEvents(
            model=client_model, message_id=draft.response_id(anthropic=True)
        )
        if anthropic
        else None
    )
    headers_sent = False
    try:
        async with backend_session().post(
            url, data=encode(forward_body), headers=_headers(draft)
        ) as response:
            if 300 <= response.status < 400:
                raise await _backend_failure(gateway, draft, 502, _redirect_refused(response.status))
            if credential_refused(response.status):
                refused = credential_refused(response.status)
                raise await _backend_failure(gateway, draft, 502, refused, "backend_credential_refused")
            if response.status >= 400:  # the same error as a whole answer's (_backend_refusal)
                detail = await response.content.read(65536)
                raise await _backend_refusal(gateway, draft, response.status, detail)
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": SSE_HEADERS + [(b"x-session-id", draft.session_id.encode())],
                }
            )
            headers_sent = True
            received, limit = 0, settings.AREAL_GATEWAY_MAX_RESPONSE_BYTES
            async for raw_line in response.content:  # one SSE line at a time
                received += len(raw_line)
                if received > limit:
                    draft.abort(str(BackendResponseTooLarge(limit)))
                    break
                line = raw_line.decode("utf-8", "replace").rstrip("\r\n")
                if disconnected.is_set():
                    draft.abort("client disconnected mid-stream")
                    break
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = wire_json.loads(data)
                if isinstance(chunk.get("error"), dict) and not chunk.get("choices"):
                    out = _stream_error(draft, chunk["error"], translator, wire)
                    with contextlib.suppress(Exception):
                        await send({"type": "http.response.body", "body": out, "more_body": True})
                    break
                draft.add_chunk(chunk, elapsed_ms=(time.perf_counter() - started) * 1000)
                # renamed for the agent in a new dict: the draft keeps the chunk the model produced
                chunk = harness_rewrite_chunk(chunk, harness)
                chunk["id"] = draft.response_id()
                if translator is not None:
                    out = b"".join(
                        anthropic_stream.sse_encode(event, body) for event, body in translator.feed(chunk)
                    )
                elif wire is not None:
                    out = wire.stream_feed(draft, chunk)
                elif chunk.get("choices") or "usage" in chunk:
                    out = b"data: " + wire_json.dumps(chunk) + b"\n\n"
                else:
                    out = b""
                if out:
                    try:
                        await send({"type": "http.response.body", "body": out, "more_body": True})
                    except Exception:
                        draft.abort("client disconnected mid-stream")
                        break
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
    draft.finish_stream(latency_ms=(time.perf_counter() - started) * 1000)
    await derive_token_versions(draft, gateway.served_versions)
    await draft.sanitize_response()
    record_step(gateway, draft, delivered=True)  # journalled before the final bytes are released
    if draft.end_session:
        await _end_session_after_step(gateway, draft)
    if harness is not None:
        draft.agent_reply(harness)
    await session_share(gateway, draft)  # before the stream ends: the next turn may go to another process
    if not draft.aborted:
        if translator is not None:
            tail = b"".join(anthropic_stream.sse_encode(event, body) for event, body in translator.finish())
        elif wire is not None:
            tail = await wire.stream_finish(draft)
        else:
            tail = b"data: [DONE]\n\n"
        with contextlib.suppress(Exception):
            await send({"type": "http.response.body", "body": tail, "more_body": False})
    elif wire is not None and not disconnected.is_set() and not draft.stream_error_sent:
        with contextlib.suppress(Exception):  # the backend broke off: the Responses stream says it failed
            await send({"type": "http.response.body", "body": wire.stream_fail(draft, draft.error)})
    return draft.cost_usd


async def handle_chat(gateway, *args):
    await handle_generation(gateway, *args, endpoint="chat")


async def handle_completions(gateway, *args):
    await handle_generation(gateway, *args, endpoint="completions")


async def handle_messages(gateway, *args):
    await handle_generation(gateway, *args, endpoint="messages")


async def post_whole(gateway, draft, url: str, data: bytes, headers) -> tuple[int, bytes]:
    """One whole (non-streamed) forward: the status and the body read under the size cap; a timeout, a
    transport error, an oversized body or a redirect fails the step with the gateway's 5xx."""
    try:
        async with backend_session().post(url, data=data, headers=headers) as response:
            return_value = response.status, await read_capped(response)
    except TimeoutError:
        raise await _backend_failure(gateway, draft, 504, "the inference backend timed out") from None
    except BackendTransportFailed as error:
        raise await _backend_failure(gateway, draft, 502, _transport_failure(error)) from None
    except BackendResponseTooLarge as error:
        raise await _backend_failure(gateway, draft, 502, str(error), "backend_response_too_large") from None
    if 300 <= return_value[0] < 400:
        raise await _backend_failure(gateway, draft, 502, _redirect_refused(return_value[0]))
    return return_value
