"""The Responses API (`POST /v1/responses`, `GET` and `DELETE /v1/responses/{id}`, at the root and under
/s/<session>/v1 as the other routes): a wire translation over the gateway's one chat path.

A create request is translated to chat completions (`responses_wire.py`) and handled by
`generation.handle_generation` like any chat call (policy, budget, session attribution, routing, harness,
the forward with token ids and logprobs, the step journalled before the answer is released); only the
answer is read back into a response object, or the chunk stream into Responses events
(`responses_stream.py`). Every backend is reached through this translation, vLLM included (its native
/v1/responses is not used: one path, one recording).

`store` (default true) keeps the answer (`StoredResponse`) before it is released, so the agent's next
call finds it on any process: `GET /v1/responses/{id}` returns it, and `previous_response_id` continues its
conversation (its messages and reply, then the new input; the new request's own instructions). A
continuing request without a session of its own (key, header, URL) is in the stored response's session.
Ids are the tenant's: another tenant's id answers 404 `response_not_found` like a missing one. Under
consent `none` or `metadata_only` nothing is kept (the answer says `store: false`); under PII mode
`redact` what is kept is redacted as the step is, so a continuation sees the redacted text.
"""

import json
import logging

from apps.gateway import responses_wire as wire
from apps.gateway.db import database
from apps.gateway.errors import GatewayError
from apps.gateway.pii_scans import off_the_loop, policy_scanner, request_scan
from apps.gateway.responses_stream import ChatStreamToResponseEvents, sse_encode

logger = logging.getLogger(__name__)

JSON_HEADERS = [(b"content-type", b"application/json")]


def _not_found(response_id: str) -> GatewayError:
    return GatewayError(
        404, f"no response {response_id!r}", "response_not_found", field="previous_response_id"
    )


def _stored_get(tenant_id: int, response_id: str):
    from apps.gateway.selectors import stored_response_get

    return stored_response_get(tenant_id=tenant_id, response_id=response_id)


class ResponsesWire:
    """One create request's translation, both ways (generation.py calls it at the points the wire differs)."""

    endpoint = "responses"

    def __init__(self, body: dict, chat_body: dict, conversation: list[dict], session_id: str | None):
        self.body, self.chat_body, self.conversation = body, chat_body, conversation
        self.session_id = session_id  # the continued response's session
        self.translator: ChatStreamToResponseEvents | None = None
        self.skeleton: dict | None = None

    @classmethod
    async def begin(cls, principal, body: dict) -> "ResponsesWire":
        history, session_id = None, None
        previous = body.get("previous_response_id")
        if previous is not None:
            if not isinstance(previous, str) or not previous:
                raise GatewayError(
                    400, "must be a response id", "invalid_request", field="previous_response_id"
                )
            stored = await database(_stored_get)(principal.tenant_id, previous)
            if stored is None:
                raise _not_found(previous)
            history, session_id = stored.conversation, stored.session_id
        store = body.get("store", True)
        if not isinstance(store, bool):
            raise GatewayError(400, "must be a boolean", "invalid_request", field="store")
        try:
            chat_body, conversation = wire.responses_request_to_chat(body, history=history)
        except wire.ResponsesRequestError as error:
            raise GatewayError(400, str(error), "invalid_request", field=error.field) from None
        return cls(body, chat_body, conversation, session_id)

    def _skeleton(self, draft) -> dict:
        if self.skeleton is None:
            keeps = self.body.get("store", True) and draft.policy.consent_mode not in (
                "none",
                "metadata_only",
            )
            self.skeleton = wire.response_skeleton(
                self.body, response_id=wire.RESPONSE_PREFIX + draft.step_id, store=bool(keeps)
            )
        return self.skeleton

    # whole answers ---------------------------------------------------------------------------------------
    async def answer(self, draft, payload: dict) -> dict:
        """The chat answer (as the agent receives it: harness renames applied) as a response object, stored
        first when it is to be kept."""
        response = wire.chat_response_to_response(payload, self._skeleton(draft))
        await self._store(draft, response)
        return response

    # streams ---------------------------------------------------------------------------------------------
    def stream_feed(self, draft, chunk: dict) -> bytes:
        if self.translator is None:
            self.translator = ChatStreamToResponseEvents(self._skeleton(draft))
        return b"".join(sse_encode(event) for event in self.translator.feed(chunk))

    async def stream_finish(self, draft) -> bytes:
        """The closing events, the response stored first (the agent's next call may name it at once)."""
        if self.translator is None:
            self.translator = ChatStreamToResponseEvents(self._skeleton(draft))
        events = self.translator.finish()
        try:
            await self._store(draft, self.translator.final)
        except Exception:  # the answer is out already: it ends, and only GET and continuation miss it
            logger.exception("responses: %s could not be stored", self.translator.final["id"])
        return b"".join(sse_encode(event) for event in events)

    def stream_fail(self, draft, message: str, code: str = "backend_error") -> bytes:
        if self.translator is None:
            self.translator = ChatStreamToResponseEvents(self._skeleton(draft))
        return b"".join(sse_encode(event) for event in self.translator.fail(message=message, code=code))

    # storing -----------------------------------------------------------------------------------------------
    async def _store(self, draft, response: dict) -> None:
        if not response.get("store") or not draft.recorded:
            return
        conversation = self.conversation + wire.input_to_messages(response["output"])
        if draft.policy.pii_mode == "redact":  # kept as the step keeps it
            scanner = policy_scanner(draft.policy)
            # its messages were scanned as the step's: taken from the memo (scan_memo.py)
            conversation, _ = await request_scan(draft.policy, scanner, conversation)
            response, _ = await off_the_loop(scanner.scan_value, response)

        def store():
            from apps.gateway.services import stored_response_create

            stored_response_create(
                tenant_id=draft.principal.tenant_id,
                response_id=response["id"],
                step_id=draft.step_id,
                session_id=draft.session_id,
                conversation=conversation,
                response=response,
                retention_until=draft.policy.retention_until(),
            )

        await database(store)()


async def handle_responses(gateway, *args):
    from apps.gateway.generation import handle_generation

    await handle_generation(gateway, *args, endpoint="responses", wire_class=ResponsesWire)


async def handle_response_by_id(gateway, scope, receive, send, headers, session_from_path, response_id: str):
    """GET (the stored response object) and DELETE (`{id, object: "response", deleted: true}`)."""
    principal, _ = await gateway.authorize(headers, "inference")
    if scope["method"] == "GET":
        stored = await database(_stored_get)(principal.tenant_id, response_id)
        if stored is None:
            raise GatewayError(404, f"no response {response_id!r}", "response_not_found")
        body = stored.response
    else:

        def delete():
            from apps.gateway.services import stored_response_delete

            return stored_response_delete(tenant_id=principal.tenant_id, response_id=response_id)

        if not await database(delete)():
            raise GatewayError(404, f"no response {response_id!r}", "response_not_found")
        body = {"id": response_id, "object": "response", "deleted": True}
    await send({"type": "http.response.start", "status": 200, "headers": JSON_HEADERS})
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})
