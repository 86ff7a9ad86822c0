"""What each framework sends, before any model can answer it: a loopback stand-in for the gateway that
answers by a fixed script and records every model call as the chat messages and tools the embedded server
would render (a Responses call through the gateway's own translation, apps/gateway/responses_wire.py).

The framework tier's model (framework_model.py) is then taught those exact prompts, so the real run, which
sends the same requests in the same order, gets the same answers from the real embedded server. The script:
the weather question, while get_weather has not been called since it was asked, is answered with that call;
anything else with "OK." (as smolagents' `final_answer` call where that tool is offered, which is how
smolagents ends a run). A tool call's id is random, as the embedded server's are (`call_` and 24 hex digits),
since smolagents writes the ids into the text of its next prompt."""

import contextlib
import json
import random
import re
import threading
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from apps.gateway.responses_wire import (
    chat_response_to_response,
    response_skeleton,
    responses_request_to_chat,
)

REPLY = "OK."
WEATHER_QUESTION = "What is the weather in Paris?"
WEATHER_ARGUMENTS = {"city": "Paris"}
WEATHER_RESULT = '{"temperature_c": 18}'
CALL_ID = re.compile(r"call_[0-9a-f]{24}")  # the embedded server's (workers/inference/chat.py)


@dataclass(frozen=True)
class Exchange:
    """One model call: the chat request as the embedded server reads it, and the text it must generate."""

    messages: list
    tools: list
    answer: str  # the model's text: plain text or a <tool_call>{...}</tool_call> span

    @property
    def call_ids_in_text(self) -> bool:
        """A tool call's id is in the text of a message (smolagents'), not only in the fields no chat
        template renders."""
        return any(CALL_ID.search(_text(message.get("content"))) for message in self.messages)


def with_new_call_ids(exchange: Exchange, rng: random.Random) -> Exchange:
    """The same exchange as another run sends it: each tool-call id replaced by a new one drawn from rng."""
    renamed: dict[str, str] = {}

    def rename(match) -> str:
        return renamed.setdefault(match.group(0), _new_call_id(rng))

    messages = json.loads(CALL_ID.sub(rename, json.dumps(exchange.messages)))
    return Exchange(messages=messages, tools=exchange.tools, answer=exchange.answer)


_FRESH_IDS = random.SystemRandom()


def _new_call_id(rng: random.Random = _FRESH_IDS) -> str:
    """`call_` and 24 hex digits, as the embedded server's ids (CALL_ID)."""
    return f"call_{rng.getrandbits(96):024x}"


def _text(content) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


def _tool_names(tools: list) -> set[str]:
    return {(tool.get("function") or {}).get("name") for tool in tools}


def _weather_question_pending(messages: list) -> bool:
    """The last user message asks about the weather and no get_weather call answered it yet (smolagents
    sends tool results as user messages beginning "Observation:")."""
    for message in reversed(messages):
        text = _text(message.get("content"))
        if message.get("role") == "assistant" and any(
            (call.get("function") or {}).get("name") == "get_weather"
            for call in message.get("tool_calls") or []
        ):
            return False
        if message.get("role") == "tool" or "Calling tools:" in text or text.startswith("Observation:"):
            return False
        if message.get("role") == "user":
            return WEATHER_QUESTION in text
    return False


def scripted_answer(messages: list, tools: list) -> tuple[str | None, tuple[str, dict] | None]:
    """(text, (tool name, arguments)) of the answer the script gives this request."""
    names = _tool_names(tools)
    if "get_weather" in names and _weather_question_pending(messages):
        return None, ("get_weather", WEATHER_ARGUMENTS)
    if "final_answer" in names:
        return None, ("final_answer", {"answer": REPLY})
    return REPLY, None


def answer_text(text: str | None, call: tuple[str, dict] | None) -> str:
    """What the embedded server's model generates for that answer (workers/inference/chat.py parses it)."""
    if call is None:
        return text or ""
    name, arguments = call
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def _chat_completion(model: str, text: str | None, call: tuple[str, dict] | None) -> dict:
    message: dict = {"role": "assistant", "content": text}
    if call is not None:
        message["tool_calls"] = [
            {
                "id": _new_call_id(),
                "type": "function",
                "function": {"name": call[0], "arguments": json.dumps(call[1], ensure_ascii=False)},
            }
        ]
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if call else "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def _chat_stream(completion: dict) -> bytes:
    """The completion as server-sent events: the whole answer in one delta, then the finish and usage."""
    choice = completion["choices"][0]
    delta = {"role": "assistant", "content": choice["message"]["content"]}
    if choice["message"].get("tool_calls"):
        delta["tool_calls"] = [{"index": 0, **call} for call in choice["message"]["tool_calls"]]
    head = {key: completion[key] for key in ("id", "created", "model")}
    chunks = [
        {**head, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]},
        {
            **head,
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}],
        },
        {**head, "object": "chat.completion.chunk", "choices": [], "usage": completion["usage"]},
    ]
    return b"".join(f"data: {json.dumps(chunk)}\n\n".encode() for chunk in chunks) + b"data: [DONE]\n\n"


class _Capture:
    def __init__(self):
        self.exchanges: list[Exchange] = []
        self.lock = threading.Lock()

    def chat(self, body: dict) -> dict:
        messages, tools = body.get("messages") or [], body.get("tools") or []
        text, call = scripted_answer(messages, tools)
        with self.lock:
            self.exchanges.append(Exchange(messages=messages, tools=tools, answer=answer_text(text, call)))
        return _chat_completion(body.get("model") or "", text, call)


@contextlib.contextmanager
def capture_server():
    """Yields (base URL, the exchanges recorded so far): `<base>/v1/chat/completions` (streamed or not),
    `<base>/v1/responses` (not streamed), and AReaL's `<base>/rl/...` session calls."""
    capture = _Capture()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
            path = self.path.rstrip("/")
            if path.endswith("/chat/completions"):
                completion = capture.chat(body)
                if body.get("stream"):
                    return self._answer(200, _chat_stream(completion), "text/event-stream")
                return self._answer(200, completion)
            if path.endswith("/responses") and not body.get("stream"):
                chat, _ = responses_request_to_chat(body)
                response = response_skeleton(body, response_id=f"resp_{uuid.uuid4().hex}", store=False)
                return self._answer(200, chat_response_to_response(capture.chat(chat), response))
            if path.endswith("/rl/start_session"):
                return self._answer(200, {"session_id": "capture", "api_key": "capture-session-key"})
            if path.endswith(("/rl/set_reward", "/rl/end_session")):
                return self._answer(200, {})
            return self._answer(404, {"error": {"message": f"the capture serves no {self.path}"}})

        def _answer(self, status: int, body, content_type: str = "application/json"):
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", capture.exchanges
    finally:
        server.shutdown()
        server.server_close()
