"""Test-only: a tiny Starlette app serving `POST /v1/messages` by translating to an OpenAI-compatible backend
(`/v1/chat/completions`) and back with `apps.gateway.anthropic_wire`, `anthropic_response` and
`anthropic_stream`, so the official `anthropic` SDK can be driven end to end without the Django gateway. Also `serve_in_thread(app)`: uvicorn on a free local port.
"""

import json
import threading
import time
from contextlib import asynccontextmanager, contextmanager

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from apps.gateway.anthropic_response import chat_response_to_message, new_message_id
from apps.gateway.anthropic_stream import ChatStreamToMessageEvents, sse_encode
from apps.gateway.anthropic_wire import (
    AnthropicRequestError,
    anthropic_error,
    messages_request_to_chat,
    openai_error_to_anthropic,
)
from tests.servers import free_port


def create_app(
    backend_url: str, *, backend_model: str | None = None, transport: httpx.AsyncBaseTransport | None = None
) -> Starlette:
    """backend_url: the backend's base URL (with /v1); backend_model: the model name sent to it instead of
    the client's (the response still names the client's model); transport: an httpx transport to use
    instead of the network (a scripted backend)."""
    state = {}

    @asynccontextmanager
    async def lifespan(app):
        state["client"] = httpx.AsyncClient(
            base_url=backend_url.rstrip("/"), transport=transport, timeout=120
        )
        try:
            yield
        finally:
            await state["client"].aclose()

    async def messages(request: Request):
        try:
            body = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            return _error(400, f"request body is not valid JSON: {error}")
        try:
            chat = messages_request_to_chat(body)
        except AnthropicRequestError as error:
            return JSONResponse(error.body(), status_code=error.status)
        model = chat["model"]
        if backend_model is not None:
            chat["model"] = backend_model
        stop_sequences = chat.get("stop")
        client: httpx.AsyncClient = state["client"]
        try:
            upstream = await client.send(
                client.build_request("POST", "/chat/completions", json=chat), stream=chat["stream"]
            )
        except httpx.HTTPError as error:
            return _error(502, f"inference backend unreachable: {error}")
        if upstream.status_code >= 400:
            await upstream.aread()
            await upstream.aclose()
            return JSONResponse(
                openai_error_to_anthropic(upstream.status_code, _json_or_text(upstream)),
                status_code=upstream.status_code,
            )
        if not chat["stream"]:
            return JSONResponse(
                chat_response_to_message(upstream.json(), model=model, stop_sequences=stop_sequences)
            )
        translator = ChatStreamToMessageEvents(
            model=model, message_id=new_message_id(), stop_sequences=stop_sequences
        )
        return StreamingResponse(
            _translate_stream(upstream, translator),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache"},
        )

    return Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])], lifespan=lifespan)


async def _translate_stream(upstream: httpx.Response, translator: ChatStreamToMessageEvents):
    try:
        async for line in upstream.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[len("data:") :].strip()
            if data == "[DONE]":
                break
            for event, payload in translator.feed(json.loads(data)):
                yield sse_encode(event, payload)
            if translator.finished:  # an error event ended it
                return
    except httpx.HTTPError as error:
        yield sse_encode("error", anthropic_error(502, f"inference backend stream broke: {error}"))
        return
    finally:
        await upstream.aclose()
    for event, payload in translator.finish():
        yield sse_encode(event, payload)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(anthropic_error(status, message), status_code=status)


def _json_or_text(response: httpx.Response):
    try:
        return response.json()
    except ValueError:
        return response.text


@contextmanager
def serve_in_thread(app):
    """Run an ASGI app with uvicorn in a daemon thread; yields its base URL (no trailing slash)."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
