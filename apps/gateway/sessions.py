"""Session attribution and per-session state held in process memory.

Order (DESIGN.md): a session key from /rl/start_session; the X-Session-Id header; the per-session base
URL /s/<session_id>/v1; otherwise message-prefix continuity within (tenant, key): a request whose
messages begin with an earlier request's messages plus that request's reply continues its session.
A request whose messages equal the previous call's prompt in the same session is a retry of it.
"""

import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass, field

MAX_SESSIONS = 100_000
MAX_FINGERPRINTS = 200_000


def _canonical(message: dict) -> bytes:
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    calls = [
        (call.get("function", {}).get("name"), call.get("function", {}).get("arguments"))
        for call in message.get("tool_calls") or []
    ]
    return json.dumps(
        [message.get("role"), content or "", calls, message.get("tool_call_id")],
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode()


def prefix_hashes(messages: list[dict]) -> list[str]:
    """hashes[k] identifies messages[:k+1]; a chained hash, so computing all of them is linear."""
    hashes, running = [], b""
    for message in messages:
        running = hashlib.blake2b(running + _canonical(message), digest_size=16).digest()
        hashes.append(running.hex())
    return hashes


def extend_hash(previous: str | None, message: dict) -> str:
    running = bytes.fromhex(previous) if previous else b""
    return hashlib.blake2b(running + _canonical(message), digest_size=16).hexdigest()


@dataclass
class SessionState:
    session_id: str
    backend: object | None = None  # the routed InferenceBackend (name, base_url, model_version)
    version: str | None = (
        None  # the routed model version (a harness-only one is served by another's backends)
    )
    last_step_id: str | None = None
    last_parent_id: str | None = None
    last_prompt_hash: str | None = None
    task_id: str = ""
    group_id: str = ""
    ended: bool = False
    step_ids: list = field(default_factory=list)


class SessionIndex:
    def __init__(self):
        self.sessions: OrderedDict[tuple[int, str], SessionState] = OrderedDict()
        self.conversations: OrderedDict[tuple[int, str, str], str] = OrderedDict()

    def get(self, tenant_id: int, session_id: str) -> SessionState:
        key = (tenant_id, session_id)
        state = self.sessions.get(key)
        if state is None:
            state = self.sessions[key] = SessionState(session_id=session_id)
            if len(self.sessions) > MAX_SESSIONS:
                self.sessions.popitem(last=False)
        else:
            self.sessions.move_to_end(key)
        return state

    def continue_by_prefix(self, tenant_id: int, key_prefix: str, hashes: list[str]) -> str | None:
        """The session whose conversation (prompt + reply) is the longest proper prefix of these
        messages, or None."""
        for prefix in reversed(hashes[:-1]):
            session_id = self.conversations.get((tenant_id, key_prefix, prefix))
            if session_id is not None:
                return session_id
        return None

    def remember_conversation(
        self, tenant_id: int, key_prefix: str, conversation_hash: str, session_id: str
    ) -> None:
        self.conversations[(tenant_id, key_prefix, conversation_hash)] = session_id
        if len(self.conversations) > MAX_FINGERPRINTS:
            self.conversations.popitem(last=False)
