"""Session attribution and per-session state: shared by every web process where it decides attribution,
held in process memory where it does not.

Order (DESIGN.md): a session key from /rl/start_session; the X-Session-Id header; the per-session base
URL /s/<session_id>/v1; otherwise message-prefix continuity within (tenant, key): a request whose
messages begin with an earlier request's messages plus that request's reply continues its session.
Exactly first; failing that, loosely: the same comparison with every system (and developer) message left
out, every run of whitespace in texts taken as one space, and tool-call arguments compared as the JSON values
they spell (a framework that re-serializes them compactly, Pydantic AI). So a framework's call
that changes the system prompt (smolagents' final-answer call) or re-sends a reply stripped still
continues its run; a request whose other messages differ in anything else (a word, a reply, a tool
result, their order) is another conversation, and the longest match wins.
A request whose messages equal the previous call's prompt in the same session is a retry of it.

Shared (apps.core.shared_state: Redis, or the embedded SQLite file), so that a conversation continued or a
call retried on another process is attributed as on the same one; each entry lives
AREAL_GATEWAY_CONVERSATION_TTL_SECONDS from the session's last step:
- the session's cursor, `gateway-session:<tenant>:<session id>`: its last step, that step's parent and its
  prompt hash (parent links and retry detection);
- the conversation map, `gateway-conversation:<tenant>:<key prefix>:<hash of prompt + reply>` → session id.
A request makes at most one read: its session's cursor when it names the session; otherwise one lookup of
the longest recorded conversation its messages extend together with that session's cursor; none when its
messages extend no assistant message (a first turn). The cursor and the conversation of an answer are
written together (one round trip, shared by the answers of the same moment) before the answer's last bytes
are released, so the agent's next turn finds them on any process. No process keeps a memo of either: the read that finds a session is also what
tells the request the session's current cursor, which another process may have moved. The same read tells
`/rl/set_reward` and `/rl/end_session`'s `final_reward` without an interaction id which completion is the
session's last (rl.py).
Per process (`SessionState`): the routed backend and version (routing re-resolves them elsewhere), the
task and group of a session started here, whether it was ended here.
"""

import asyncio
import hashlib
import json
import logging
from collections import OrderedDict
from dataclasses import dataclass, field

from django.conf import settings

from apps.core.shared_state import (
    SharedStateUnavailable,
    shared_find,
    shared_get,
    shared_set_many,
    shared_set_many_now,
)

logger = logging.getLogger(__name__)

MAX_SESSIONS = 100_000
MAX_CANDIDATES = 256  # conversations looked up per request: its most recent assistant messages


SYSTEM_ROLES = ("system", "developer")


def _collapse(text):
    return " ".join(text.split()) if isinstance(text, str) else text


def _loose_arguments(arguments):
    """Tool-call arguments as the JSON value they spell (keys sorted, no spaces); text that is not JSON with
    its whitespace collapsed."""
    try:
        return json.dumps(json.loads(arguments), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        return _collapse(arguments)


def _canonical(message: dict, *, loose: bool = False) -> bytes:
    """The message as attribution compares it; `loose`: every run of whitespace in its text as one space,
    none at either end (a framework that re-sends a reply stripped or re-wrapped), and its tool-call arguments
    as JSON values (a framework that re-serializes them)."""
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    calls = [
        (call.get("function", {}).get("name"), call.get("function", {}).get("arguments"))
        for call in message.get("tool_calls") or []
    ]
    if loose:
        content = _collapse(content)
        calls = [(name, _loose_arguments(arguments)) for name, arguments in calls]
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


def extend_hash(previous: str | None, message: dict, *, loose: bool = False) -> str:
    running = bytes.fromhex(previous) if previous else b""
    return hashlib.blake2b(running + _canonical(message, loose=loose), digest_size=16).hexdigest()


def loose_prefix_hashes(messages: list[dict]) -> list[str | None]:
    """hashes[k] identifies messages[:k+1] with its system messages left out and whitespace collapsed (the
    loose form of a conversation); None up to the first message that is not a system message."""
    hashes: list[str | None] = []
    running: str | None = None
    for message in messages:
        if message.get("role") not in SYSTEM_ROLES:
            running = extend_hash(running, message, loose=True)
        hashes.append(running)
    return hashes


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

    def cursor(self) -> str:
        """The shared part: the last step, its parent and its prompt hash."""
        return json.dumps([self.last_step_id, self.last_parent_id, self.last_prompt_hash])

    def resume(self, cursor: str | None) -> None:
        """Takes the shared cursor (None: no step in the TTL, or none recorded) over this process's."""
        self.last_step_id, self.last_parent_id, self.last_prompt_hash = (
            json.loads(cursor) if cursor else (None, None, None)
        )


def conversation_candidates(messages: list[dict], hashes: list, *, loose: bool = False) -> list[str]:
    """Hashes of the proper prefixes of `messages` that end with an assistant message, longest first: the
    only prefixes a recorded conversation (a prompt and its reply) can be (`loose`: of the loose form)."""
    candidates = []
    for index in range(len(messages) - 2, -1, -1):
        if messages[index].get("role") == "assistant" and hashes[index] is not None:
            candidates.append(("~" if loose else "") + hashes[index])
            if len(candidates) == MAX_CANDIDATES:
                break
    return candidates


def _cursor_key(tenant_id: int, session_id: str) -> str:
    return f"gateway-session:{tenant_id}:{session_id}"


def _conversation_key(tenant_id: int, key_prefix: str, conversation_hash: str) -> str:
    return f"gateway-conversation:{tenant_id}:{key_prefix}:{conversation_hash}"


class SharedWrites:
    """Group commit for the shared cursors and conversations: the entries of the answers of the same moment go out
    together (one SQLite transaction, or one Redis pipeline), instead of one round trip each; every caller still
    returns only once its own entries are written. The moment is one turn of the event loop: a write is queued, and
    the queue goes out on the loop's next turn, with every entry queued by then; while a write is in flight,
    entries wait for the next one. Writes go out in order, one at a time, so a later value of a key is never
    overwritten by an earlier one. One queue per event loop. On the embedded store a write is made on the event
    loop itself when the file's lock is free (`shared_set_many_now`), else on a thread that waits for it."""

    def __init__(self):
        self._queues: dict[asyncio.AbstractEventLoop, dict] = {}

    async def write(self, entries: dict[str, str]) -> None:
        """Raises SharedStateUnavailable when the write that carried these entries failed."""
        loop = asyncio.get_running_loop()
        queue = self._queues.get(loop)
        if queue is None:
            for stale in [other for other in self._queues if other.is_closed()]:
                del self._queues[stale]
            queue = self._queues[loop] = {"entries": {}, "waiters": [], "flushing": False}
        waiter = loop.create_future()
        queue["entries"].update(entries)
        queue["waiters"].append(waiter)
        if not queue["flushing"]:
            queue["flushing"] = True
            loop.call_soon(self._write_on_loop, loop, queue)
        await waiter

    @classmethod
    def _write_on_loop(cls, loop: asyncio.AbstractEventLoop, queue: dict) -> None:
        """The queue written on the loop where the store allows it (the embedded file's lock free, no upkeep
        due); otherwise handed to `_flush`, which waits on a thread."""
        outcome: Exception | None = None
        try:
            if not shared_set_many_now(
                queue["entries"], ttl_seconds=settings.AREAL_GATEWAY_CONVERSATION_TTL_SECONDS
            ):
                queue["task"] = loop.create_task(
                    cls._flush(queue)
                )  # held: a task nobody holds may be collected
                return
        except Exception as error:  # noqa: BLE001  (each waiter gets the failure of its write)
            outcome = error
        waiters = queue["waiters"]
        queue["entries"], queue["waiters"], queue["flushing"] = {}, [], False
        _settle(waiters, outcome)

    @staticmethod
    async def _flush(queue: dict) -> None:
        try:
            while queue["waiters"]:
                entries, waiters = queue["entries"], queue["waiters"]
                queue["entries"], queue["waiters"] = {}, []
                ttl_seconds = settings.AREAL_GATEWAY_CONVERSATION_TTL_SECONDS
                try:
                    if not shared_set_many_now(entries, ttl_seconds=ttl_seconds):
                        await asyncio.to_thread(shared_set_many, entries, ttl_seconds=ttl_seconds)
                except Exception as error:  # noqa: BLE001  (each waiter gets the failure of its write)
                    outcome: Exception | None = error
                else:
                    outcome = None
                _settle(waiters, outcome)
        finally:
            queue["flushing"] = False


def _settle(waiters: list, outcome: Exception | None) -> None:
    for waiter in waiters:
        if waiter.done():
            continue  # its request was cancelled
        if outcome is None:
            waiter.set_result(None)
        else:
            waiter.set_exception(outcome)


class SessionIndex:
    def __init__(self):
        self.sessions: OrderedDict[tuple[int, str], SessionState] = OrderedDict()
        self.writes = SharedWrites()

    def get(self, tenant_id: int, session_id: str) -> SessionState:
        """This process's state of the session (its cursor as this process last read or advanced it)."""
        key = (tenant_id, session_id)
        state = self.sessions.get(key)
        if state is None:
            state = self.sessions[key] = SessionState(session_id=session_id)
            if len(self.sessions) > MAX_SESSIONS:
                self.sessions.popitem(last=False)
        else:
            self.sessions.move_to_end(key)
        return state

    async def resume(self, tenant_id: int, session_id: str) -> SessionState:
        """The session's state with its cursor as every process last left it (one shared read)."""
        state = self.get(tenant_id, session_id)
        try:
            cursor = await asyncio.to_thread(shared_get, _cursor_key(tenant_id, session_id))
        except SharedStateUnavailable as error:
            logger.warning(
                "session %s: shared session state unreadable, using this process's: %s", session_id, error
            )
            return state
        state.resume(cursor)
        return state

    async def continue_by_prefix(
        self,
        tenant_id: int,
        key_prefix: str,
        messages: list[dict],
        hashes: list[str],
        loose_hashes: list[str | None] | None = None,
    ) -> SessionState | None:
        """The session whose recorded conversation (prompt + reply) is the longest proper prefix of these
        messages, with its cursor (one shared read; none for messages that extend no assistant message), or
        None."""
        # the exact conversations first, then the loose ones (system messages out, whitespace collapsed)
        candidates = conversation_candidates(messages, hashes)
        if loose_hashes is None:
            loose_hashes = loose_prefix_hashes(messages)
        candidates += conversation_candidates(messages, loose_hashes, loose=True)
        if not candidates:
            return None
        try:
            session_id, cursor = await asyncio.to_thread(
                shared_find,
                [_conversation_key(tenant_id, key_prefix, candidate) for candidate in candidates],
                follow_prefix=_cursor_key(tenant_id, ""),
            )
        except SharedStateUnavailable as error:
            logger.warning("shared session state unreadable, starting a new session: %s", error)
            return None
        if session_id is None:
            return None
        state = self.get(tenant_id, session_id)
        state.resume(cursor)
        return state

    async def share(
        self,
        *,
        tenant_id: int,
        key_prefix: str,
        state: SessionState,
        conversation_hash: str | None,
        loose_hash: str | None = None,
    ) -> None:
        """Writes the session's cursor and, when given, the conversation that now leads to it (in one round trip,
        shared with the requests answered at the same time: `SharedWrites`), each to live
        AREAL_GATEWAY_CONVERSATION_TTL_SECONDS."""
        entries = {_cursor_key(tenant_id, state.session_id): state.cursor()}
        if conversation_hash is not None:
            entries[_conversation_key(tenant_id, key_prefix, conversation_hash)] = state.session_id
        if loose_hash is not None:  # the same conversation in its loose form (conversation_candidates)
            entries[_conversation_key(tenant_id, key_prefix, "~" + loose_hash)] = state.session_id
        try:
            await self.writes.write(entries)
        except SharedStateUnavailable as error:
            logger.warning("session %s: shared session state not written: %s", state.session_id, error)
