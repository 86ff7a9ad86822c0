"""An instant, OpenAI-shaped upstream for the gateway benchmark.

It answers `POST /v1/chat/completions` (whole body or SSE stream), `GET /v1/models` and `GET /health` with
a fixed short completion that carries vLLM's token data (`prompt_token_ids`, `choices[0].token_ids`,
`choices[0].logprobs.content[].logprob`), so that a gateway in front of it finds what it records from a
real backend. It does as little as it can per request: a raw ASGI callable (no framework), response bytes
precomputed per model name, only the request id spliced in, under uvicorn with uvloop and httptools when
they are installed. Whatever latency a proxy adds on top of it is the proxy's.

    python -m bench.gateway.upstream --port 18080
"""

import argparse
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx

CREATED = 1_700_000_000
DEFAULT_MODEL = "bench-model"
ID_MARK = "@@ID@@"  # replaced per response by a fresh id; cannot occur in JSON-escaped text we emit

# The fixed completion: (token text, token id, logprob).
COMPLETION = (
    ("Hello", 9906, -0.0123),
    ("!", 0, -0.2051),
    (" How", 2650, -0.0419),
    (" can", 649, -0.0031),
    (" I", 358, -0.0007),
    (" help", 1520, -0.0152),
    ("?", 30, -0.1187),
)
PROMPT_TOKEN_IDS = tuple(range(128000, 128024))  # 24 prompt tokens
COMPLETION_TEXT = "".join(text for text, _, _ in COMPLETION)
USAGE = {
    "prompt_tokens": len(PROMPT_TOKEN_IDS),
    "completion_tokens": len(COMPLETION),
    "total_tokens": len(PROMPT_TOKEN_IDS) + len(COMPLETION),
}


def _dumps(value) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _logprob_entry(text: str, logprob: float) -> dict:
    return {"token": text, "logprob": logprob, "bytes": list(text.encode()), "top_logprobs": []}


def build_completion(model: str) -> bytes:
    """The non-streaming chat.completion body, with ID_MARK where the id goes."""
    return _dumps(
        {
            "id": ID_MARK,
            "object": "chat.completion",
            "created": CREATED,
            "model": model,
            "prompt_token_ids": list(PROMPT_TOKEN_IDS),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": COMPLETION_TEXT, "tool_calls": []},
                    "logprobs": {
                        "content": [_logprob_entry(text, logprob) for text, _, logprob in COMPLETION]
                    },
                    "finish_reason": "stop",
                    "stop_reason": None,
                    "token_ids": [token_id for _, token_id, _ in COMPLETION],
                }
            ],
            "usage": USAGE,
        }
    )


def build_stream(model: str, include_usage: bool) -> bytes:
    """The whole SSE answer (one chunk per token, then finish, usage if asked, [DONE]), with ID_MARK."""
    head = {"id": ID_MARK, "object": "chat.completion.chunk", "created": CREATED, "model": model}
    events = []
    first = {
        **head,
        "prompt_token_ids": list(PROMPT_TOKEN_IDS),
        "choices": [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
        ],
    }
    events.append(first)
    for text, token_id, logprob in COMPLETION:
        events.append(
            {
                **head,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"content": text},
                        "logprobs": {"content": [_logprob_entry(text, logprob)]},
                        "finish_reason": None,
                        "token_ids": [token_id],
                    }
                ],
            }
        )
    events.append(
        {
            **head,
            "choices": [
                {
                    "index": 0,
                    "delta": {},
                    "logprobs": None,
                    "finish_reason": "stop",
                    "stop_reason": None,
                }
            ],
        }
    )
    if include_usage:
        events.append({**head, "choices": [], "usage": USAGE})
    return b"".join(b"data: " + _dumps(event) + b"\n\n" for event in events) + b"data: [DONE]\n\n"


MODELS_BODY = _dumps(
    {
        "object": "list",
        "data": [
            {"id": DEFAULT_MODEL, "object": "model", "created": CREATED, "owned_by": "bench"},
        ],
    }
)
HEALTH_BODY = b'{"status":"ok"}'
JSON_HEADERS = [(b"content-type", b"application/json")]
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


class Upstream:
    """The ASGI callable. Templates are cached per (model, stream, include_usage); 256 models at most."""

    def __init__(self):
        self._templates: dict[tuple[str, bool, bool], tuple[bytes, bytes]] = {}
        self._ids = itertools.count(1)
        self._id_prefix = f"chatcmpl-bench{os.getpid():x}-".encode()

    async def __call__(self, scope, receive, send):
        kind = scope["type"]
        if kind == "http":
            path = scope["path"]
            if scope["method"] == "POST" and path.endswith("/chat/completions"):
                await self._chat(receive, send)
            elif path.endswith("/models"):
                await _respond(send, 200, MODELS_BODY)
            elif path == "/health":
                await _respond(send, 200, HEALTH_BODY)
            else:
                await _respond(send, 404, _error("not found: " + path, "not_found_error"))
        elif kind == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return

    async def _chat(self, receive, send):
        message = await receive()
        raw = message.get("body", b"")
        while message.get("more_body"):
            message = await receive()
            raw += message.get("body", b"")
        try:
            request = json.loads(raw)
            model = request.get("model") or DEFAULT_MODEL
            stream = bool(request.get("stream"))
            include_usage = stream and bool((request.get("stream_options") or {}).get("include_usage"))
        except (ValueError, AttributeError):
            await _respond(send, 400, _error("body is not a JSON object", "invalid_request_error"))
            return
        key = (model, stream, include_usage)
        template = self._templates.get(key)
        if template is None:
            body = build_stream(model, include_usage) if stream else build_completion(model)
            head, _, tail = body.partition(ID_MARK.encode())
            template = (head, tail)
            if len(self._templates) < 256:
                self._templates[key] = template
        head, tail = template
        # Streamed ids repeat in every chunk: splice each occurrence.
        response_id = self._id_prefix + str(next(self._ids)).encode()
        body = head + response_id + tail.replace(ID_MARK.encode(), response_id)
        if stream:
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        else:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": JSON_HEADERS + [(b"content-length", str(len(body)).encode())],
                }
            )
        await send({"type": "http.response.body", "body": body})


def _error(message: str, kind: str) -> bytes:
    return _dumps({"error": {"message": message, "type": kind, "code": None}})


async def _respond(send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": JSON_HEADERS + [(b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


app = Upstream()


def _available(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def serve(host: str, port: int) -> None:
    import uvicorn

    uvicorn.run(
        app,
        host=host,
        port=port,
        loop="uvloop" if _available("uvloop") else "asyncio",
        http="httptools" if _available("httptools") else "h11",
        lifespan="on",
        access_log=False,
        log_level="warning",
        server_header=False,
        date_header=False,
    )


# -- process helpers (also used by litellm_peer and run) ------------------------------------------------


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def port_in_use(host: str, port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.2)
        return probe.connect_ex((host, port)) == 0


def wait_http_ready(
    url: str,
    process: subprocess.Popen | None,
    timeout: float,
    log: Path | None = None,
    headers: dict | None = None,
) -> None:
    """Poll `url` until it answers 200; fail early if `process` exits."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
            raise RuntimeError(
                f"{url}: the server exited with {process.returncode} before it was ready\n{tail}"
            )
        try:
            response = httpx.get(url, headers=headers, timeout=2.0)
            if response.status_code == 200:
                return
            last = f"HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            last = type(exc).__name__
        time.sleep(0.2)
    raise TimeoutError(f"{url} not ready after {timeout:.0f} s ({last})")


def stop_process(process: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM the process group we started (workers included), then SIGKILL after `grace` seconds."""
    if process.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def running_upstream(port: int, host: str = "127.0.0.1", log: Path | None = None):
    """Start this upstream in its own process (own interpreter, own core if there is one); yield its URL."""
    if port_in_use(host, port):
        raise RuntimeError(
            f"{host}:{port} is already in use; pick another --upstream-port or pass --upstream-url"
        )
    repo_root = Path(__file__).resolve().parents[2]
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 (the child process keeps it)
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.gateway.upstream", "--host", host, "--port", str(port)],
        cwd=repo_root,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        url = f"http://{host}:{port}"
        wait_http_ready(url + "/health", process, timeout=30.0, log=log)
        yield url, process
    finally:
        stop_process(process)
        if log:
            out.close()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18080)
    args = parser.parse_args(argv)
    serve(args.host, args.port)


if __name__ == "__main__":
    main()
