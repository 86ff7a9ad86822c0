"""A step's record handed to the write-ahead journal (journal.py) and its session moved past it: refused
before forwarding when it could not be journalled (`journal_check`), journalled before the answer is released
(`record_step`), and the session's cursor shared with every web process (`session_share`).
"""

from apps.gateway.errors import GatewayError
from apps.gateway.journal import JournalUnavailable
from apps.gateway.recording import StepDraft
from apps.gateway.sessions import extend_hash


def _journal_unavailable(error: JournalUnavailable) -> GatewayError:
    return GatewayError(
        503,
        "the gateway cannot record steps right now (its journal's disk is full or failing); retry later",
        "journal_unavailable",
        retry_after=error.retry_after,
    )


def journal_check(gateway, draft: StepDraft) -> None:
    """Refuses the request (503, Retry-After) before it is forwarded when its step could not be journalled: a
    journal write failed recently or its disk is nearly full. Consent `none` records nothing: never refused."""
    if draft.policy.consent_mode == "none":
        return
    try:
        gateway.journal.check_writable()
    except JournalUnavailable as error:
        raise _journal_unavailable(error) from None


def record_step(gateway, draft: StepDraft, *, delivered: bool = False) -> None:
    """Journals the step (one whole record, before the response is released) and advances the session.

    If the journal cannot take it: an answer not yet sent is replaced by 503 (GatewayError, nothing
    recorded, the session does not advance); an answer already out (`delivered`, a stream) keeps its step
    in memory for the next group commit, so it is lost only if this process dies before that commit."""
    record = draft.to_record()
    if record is not None:
        try:
            gateway.journal.append(record)
        except JournalUnavailable as error:
            if not delivered:
                raise _journal_unavailable(error) from None
            gateway.journal.append_unjournalled(record)
        draft.recorded = True
    session_advance(draft, record)


def session_advance(draft: StepDraft, record: dict | None) -> None:
    """Moves the session's cursor past this step (a retry replaces the attempt it repeats)."""
    if draft.session is not None:
        if record is not None and record.get("retry_of"):
            draft.session.last_step_id = draft.step_id
        else:
            draft.session.last_parent_id = draft.session.last_step_id
            draft.session.last_step_id = draft.step_id
        draft.session.last_prompt_hash = draft.prompt_hash
        draft.session.step_ids.append(draft.step_id)


async def session_share(gateway, draft: StepDraft) -> None:
    """Shares the session's cursor, and the conversation this answer leads to (prompt + reply, the key of
    message-prefix continuation), with every web process: called once the step is recorded and before the
    answer's last bytes are released, so the agent's next turn or retry finds them on any process. A step
    that was not recorded (consent `none`, a refused journal write) shares nothing."""
    if draft.session is None or not draft.recorded:
        return
    conversation = loose = None
    if draft.endpoint != "completions" and draft.reply_message is not None:
        conversation = extend_hash(draft.prompt_hash, draft.reply_message)
        loose = extend_hash(draft.loose_prompt_hash, draft.reply_message, loose=True)
    await gateway.sessions.share(
        tenant_id=draft.principal.tenant_id,
        key_prefix=draft.principal.key_prefix,
        state=draft.session,
        conversation_hash=conversation,
        loose_hash=loose,
    )
