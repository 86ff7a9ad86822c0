"""Test-only: an OpenAI-compatible server on loopback that answers like vLLM, with token ids and logprobs but
no per-token policy versions, plus the admin routes publication calls on vLLM (`/pause`, `/collective_rpc`,
`/update_weight_version`, `/resume`, `/weight_info`). A test can hold an answer after some of its tokens
(`hold(after=N)`) until it calls `release()`, to put a weight swap inside a request."""

import asyncio
import json
import threading

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

PROMPT_IDS = [1, 2, 3]
LOGPROB = -0.5


class VersionlessServer:
    def __init__(self, *, tokens: int = 6):
        self.tokens = tokens
        self.hold_after: int | None = None
        self.holding = threading.Event()  # an answer waits at its hold
        self._released = threading.Event()
        self.admin_calls: list[str] = []  # path and query of each admin call, in order
        self.weight_version: str | None = None
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/health", self.health, methods=["GET"]),
                Route("/weight_info", self.weight_info, methods=["GET"]),
                Route("/pause", self.admin, methods=["POST"]),
                Route("/resume", self.admin, methods=["POST"]),
                Route("/collective_rpc", self.admin, methods=["POST"]),
                Route("/update_weight_version", self.admin, methods=["POST"]),
            ]
        )

    def hold(self, *, after: int) -> None:
        """The next answers stop after `after` tokens until `release()`."""
        self.hold_after = after
        self.holding.clear()
        self._released.clear()

    def release(self) -> None:
        self.hold_after = None
        self._released.set()

    async def _wait_if_held(self, produced: int) -> None:
        if self.hold_after is not None and produced == self.hold_after:
            self.holding.set()
            await asyncio.to_thread(self._released.wait, 30)

    # routes -------------------------------------------------------------------------------------------
    async def health(self, request: Request):
        return JSONResponse({})

    async def weight_info(self, request: Request):
        return JSONResponse({"weight_version": self.weight_version})

    async def admin(self, request: Request):
        body = await request.body()
        query = f"?{request.url.query}" if request.url.query else ""
        self.admin_calls.append(request.url.path + query)
        if request.url.path == "/update_weight_version":
            self.weight_version = json.loads(body)["new_version"]
        return JSONResponse({} if request.url.path != "/collective_rpc" else {"results": [None]})

    async def chat(self, request: Request):
        body = await request.json()
        count = min(self.tokens, int(body.get("max_tokens") or self.tokens))
        ids = [100 + index for index in range(count)]
        if body.get("stream"):
            return StreamingResponse(self._stream(body, ids), media_type="text/event-stream")
        await self._wait_if_held(0)
        return JSONResponse(
            {
                "id": "chatcmpl-standin",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "prompt_token_ids": PROMPT_IDS,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "".join(_piece(i) for i in ids)},
                        "logprobs": {"content": [_logprob(i) for i in ids]},
                        "finish_reason": "length",
                        "token_ids": ids,
                    }
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": count, "total_tokens": 3 + count},
            }
        )

    async def _stream(self, body: dict, ids: list[int]):
        head = {
            "id": "chatcmpl-standin",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": body["model"],
        }
        yield _event({**head, "prompt_token_ids": PROMPT_IDS, "choices": [_delta({"role": "assistant"})]})
        for produced, token in enumerate(ids):
            await self._wait_if_held(produced)
            choice = _delta({"content": _piece(token)}, logprobs={"content": [_logprob(token)]})
            yield _event({**head, "choices": [{**choice, "token_ids": [token]}]})
        yield _event({**head, "choices": [_delta({}, finish_reason="length")]})
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": 3, "completion_tokens": len(ids), "total_tokens": 3 + len(ids)}
            yield _event({**head, "choices": [], "usage": usage})
        yield b"data: [DONE]\n\n"


def _piece(token: int) -> str:
    return f"w{token} "


def _logprob(token: int) -> dict:
    return {
        "token": _piece(token),
        "logprob": LOGPROB,
        "bytes": list(_piece(token).encode()),
        "top_logprobs": [],
    }


def _delta(delta: dict, *, finish_reason=None, logprobs=None) -> dict:
    return {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}


def _event(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"
