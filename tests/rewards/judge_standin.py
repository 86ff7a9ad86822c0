"""Test-only: a tiny OpenAI-compatible judge on loopback that answers from a script, so the LLM-judge path can be
driven end to end through the real gateway with a verdict known in advance. It keeps every request body."""

import contextlib
import time
import uuid

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.gateway.anthropic_app import serve_in_thread


class JudgeStandIn:
    """answers: what to reply, in order (the last repeats): a text (a 200 chat completion) or an HTTP status
    (an error answer)."""

    def __init__(self, model: str, answers: list):
        self.model, self.answers, self.requests = model, list(answers), []

    def _next(self):
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    async def chat(self, request: Request):
        self.requests.append(await request.json())
        answer = self._next()
        if isinstance(answer, int):
            return JSONResponse(
                {"error": {"message": "the stand-in is down", "type": "server_error"}}, answer
            )
        return JSONResponse(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": self.model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": answer},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52},
            }
        )

    async def models(self, request: Request):
        return JSONResponse({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/v1/models", self.models, methods=["GET"]),
            ]
        )


@contextlib.contextmanager
def judge_standin(model: str, answers: list):
    """(base URL, the stand-in) of a scripted judge served on 127.0.0.1."""
    standin = JudgeStandIn(model, answers)
    with serve_in_thread(standin.app()) as url:
        yield url, standin
