"""Test-only stand-ins for hosted providers, served on 127.0.0.1 (never a real provider).

`openai_standin(...)`: an OpenAI-compatible API that requires `Authorization: Bearer <key>` on every path and,
unless told it accepts it, refuses a body carrying `return_token_ids` (as hosted APIs do); with
`refuses_max_tokens=True` it also refuses `max_tokens`, as OpenAI's reasoning models do. It answers chat
completions whole or streamed; with `token_data=True` it returns token ids and logprobs like vLLM.

`anthropic_standin(...)`: the Anthropic Messages API shape; requires `x-api-key` and `anthropic-version`, refuses
anything that looks like a translated chat request (a `system` message, `return_token_ids`, `logprobs`), and
answers text (or a tool_use block when tools are offered), whole or as Anthropic's event stream.

Each records what it received (`Recorder.requests`: path, headers, body) for the tests to check.
"""

import json
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

REPLY = "Paris is the capital of France."


@dataclass
class Recorder:
    requests: list = field(default_factory=list)

    async def record(self, request: Request) -> dict:
        raw = await request.body()
        body = json.loads(raw) if raw else {}
        self.requests.append({"path": request.url.path, "headers": dict(request.headers), "body": body})
        return body

    def of(self, path: str) -> list[dict]:
        return [entry for entry in self.requests if entry["path"] == path]


def openai_standin(
    *,
    key: str,
    model: str,
    accepts_return_token_ids: bool = False,
    token_data: bool = False,
    refuses_max_tokens: bool = False,
):
    recorder = Recorder()

    def refused(request: Request) -> JSONResponse | None:
        given = request.headers.get("authorization", "")
        if given != f"Bearer {key}":
            shown = given[-4:] if given else "none"
            return JSONResponse(
                {
                    "error": {
                        "message": f"Incorrect API key provided: ...{shown}",
                        "type": "invalid_request_error",
                    }
                },
                status_code=401,
            )
        return None

    async def models(request: Request):
        await recorder.record(request)
        return refused(request) or JSONResponse(
            {"object": "list", "data": [{"id": model, "object": "model"}]}
        )

    async def chat(request: Request):
        body = await recorder.record(request)
        refusal = refused(request)
        if refusal is not None:
            return refusal
        if "return_token_ids" in body and not accepts_return_token_ids:
            return JSONResponse(
                {"error": {"message": "Unrecognized request argument supplied: return_token_ids"}},
                status_code=400,
            )
        if "max_tokens" in body and refuses_max_tokens:
            return JSONResponse(
                {
                    "error": {
                        "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
                        "Use 'max_completion_tokens' instead.",
                        "type": "invalid_request_error",
                        "param": "max_tokens",
                        "code": "unsupported_parameter",
                    }
                },
                status_code=400,
            )
        words = REPLY.split(" ")
        if body.get("stream"):
            return StreamingResponse(_openai_stream(model, words, token_data), media_type="text/event-stream")
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": REPLY},
            "finish_reason": "stop",
        }
        answer = {
            "id": "chatcmpl-standin",
            "object": "chat.completion",
            "model": model,
            "choices": [choice],
            "usage": {"prompt_tokens": 9, "completion_tokens": len(words), "total_tokens": 9 + len(words)},
        }
        if token_data:
            answer["prompt_token_ids"] = list(range(1, 10))
            choice["token_ids"] = list(range(100, 100 + len(words)))
            choice["logprobs"] = {"content": [{"token": w, "logprob": -0.5} for w in words]}
        return JSONResponse(answer)

    app = Starlette(
        routes=[
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/chat/completions", chat, methods=["POST"]),
        ]
    )
    return app, recorder


def _openai_stream(model: str, words: list[str], token_data: bool):
    for position, word in enumerate(words):
        choice = {"index": 0, "delta": {"content": (" " if position else "") + word}, "finish_reason": None}
        if token_data:
            choice["token_ids"] = [100 + position]
            choice["logprobs"] = {"content": [{"token": word, "logprob": -0.5}]}
        chunk = {
            "id": "chatcmpl-standin",
            "object": "chat.completion.chunk",
            "model": model,
            "choices": [choice],
        }
        if token_data and position == 0:
            chunk["prompt_token_ids"] = list(range(1, 10))
        yield f"data: {json.dumps(chunk)}\n\n"
    done = {
        "id": "chatcmpl-standin",
        "model": model,
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
    }
    yield f"data: {json.dumps(done)}\n\n"
    usage = {
        "id": "chatcmpl-standin",
        "model": model,
        "choices": [],
        "usage": {"prompt_tokens": 9, "completion_tokens": len(words)},
    }
    yield f"data: {json.dumps(usage)}\n\n"
    yield "data: [DONE]\n\n"


def anthropic_standin(*, key: str, model: str):
    recorder = Recorder()

    def refused(request: Request) -> JSONResponse | None:
        if request.headers.get("x-api-key") != key:
            return JSONResponse(
                {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}},
                status_code=401,
            )
        if not request.headers.get("anthropic-version"):
            return JSONResponse(
                {
                    "type": "error",
                    "error": {"type": "invalid_request_error", "message": "anthropic-version required"},
                },
                status_code=400,
            )
        return None

    async def models(request: Request):
        await recorder.record(request)
        return refused(request) or JSONResponse({"data": [{"id": model, "type": "model"}], "has_more": False})

    async def messages(request: Request):
        body = await recorder.record(request)
        refusal = refused(request)
        if refusal is not None:
            return refusal
        translated = {"return_token_ids", "logprobs", "stream_options"} & set(body) or any(
            message.get("role") == "system" for message in body.get("messages") or []
        )
        if translated:
            return JSONResponse(
                {
                    "type": "error",
                    "error": {"type": "invalid_request_error", "message": "not a Messages request"},
                },
                status_code=400,
            )
        tool = (body.get("tools") or [None])[0]
        content = (
            [{"type": "tool_use", "id": "toolu_standin", "name": tool["name"], "input": {"city": "Paris"}}]
            if tool
            else [{"type": "text", "text": REPLY}]
        )
        stop_reason = "tool_use" if tool else "end_turn"
        message = {
            "id": "msg_standin",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": 12, "output_tokens": 7},
        }
        if body.get("stream"):
            return StreamingResponse(_anthropic_stream(message), media_type="text/event-stream")
        return JSONResponse(message)

    app = Starlette(
        routes=[
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/messages", messages, methods=["POST"]),
        ]
    )
    return app, recorder


def _event(name: str, data: dict) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


def _anthropic_stream(message: dict):
    start = {**message, "content": [], "stop_reason": None, "usage": {"input_tokens": 12, "output_tokens": 1}}
    yield _event("message_start", {"type": "message_start", "message": start})
    yield _event("ping", {"type": "ping"})
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            yield _event(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                },
            )
            for word in block["text"].split(" "):
                delta = {
                    "type": "text_delta",
                    "text": word if word == block["text"].split(" ")[0] else " " + word,
                }
                yield _event(
                    "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
                )
        else:
            opening = {**block, "input": {}}
            yield _event(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": opening},
            )
            arguments = json.dumps(block["input"])
            for piece in (arguments[:5], arguments[5:]):
                delta = {"type": "input_json_delta", "partial_json": piece}
                yield _event(
                    "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
                )
        yield _event("content_block_stop", {"type": "content_block_stop", "index": index})
    yield _event(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": 7},
        },
    )
    yield _event("message_stop", {"type": "message_stop"})
