"""AReaL-compatible session endpoints and the agent-facing reward endpoint.

POST /rl/start_session {task_id, group_size? | group_id?} → {session_id, api_key, group_id?}: group_size
numbers the task's groups (AReaL's), group_id names the caller's own (comparable tasks that share a GRPO
baseline). The returned key is bound to the session; the agent uses it for its completions and for
set_reward / end_session. While the tenant's online run has no capacity left
(apps.training.online.online_capacity) it answers 429 + Retry-After.
POST /rl/set_reward {reward, interaction_id?}: no interaction id → the session's last completion, whichever
web process served it: the last step of the session's shared cursor (sessions.py; this process's memory may
be behind), once that step is in the database (the serving process stores it within a journal flush; this
waits up to AREAL_GATEWAY_REWARD_STEP_WAIT_MS, then answers 503 `completion_not_recorded` + Retry-After and
stores nothing). The interaction must be one of the session's own (404 otherwise). Idempotent: the same
reward again for the same interaction (a client's retry) stores nothing; a new value replaces the agent's
reward for it, recorded as a new reward naming the one it replaces
(apps.rewards.services.reward_set_for_interaction).
A session's rewards go to its newest trajectory (apps.rewards.selectors.reward_session_target): after its
trajectory ended and a late step went on in a continuation `<session>~2`, the continuation, whose last
completion is rewarded, and which end_session ends and gives final_reward; an interaction id pins the
reward to that step's trajectory, whichever of the session's it is. 410 only once the newest has ended.
POST /rl/end_session {final_reward?}: with `final_reward` (a finite number) it is recorded first, like
set_reward without an interaction id (on the session's last completion, or the trajectory when it has none);
a bad one is a 422 that ends nothing. Then the trajectory is complete; later calls with the key answer 410
(until the key expires from the cache: then 401, like any unknown key). The body may be empty.
The session of set_reward / end_session is the session key's; AReaL's older clients name it instead, with
the tenant's API key: in the path (/v1/<session_id>/rl/..., /s/<session_id>/rl/..., the way they also send
completions to /v1/<session_id>/chat/completions) or as `session_id` in the body (`completion_id` is taken for
`interaction_id`). A session the tenant does not have answers 404 whether or not another tenant has it; a
session key naming another session than its own answers 409.
/rl/start_session is rate limited per tenant (AREAL_GATEWAY_SESSION_STARTS_PER_MINUTE, and the tenant's
requests-per-minute limit): 429 + Retry-After.
POST /v1/rewards {session_id | step_id | interaction_id, value, kind?, source?, comment?, idempotency_key?}:
  a session id reaches the session's newest trajectory, a step id the step's own (as above).
  spec? names the reward spec to check against (default: the agent's training spec); label? is a category
  or, with kind critique, the correction text ("what it should have said"; no value needed).
"""

import asyncio
import json
import math
import uuid
from dataclasses import dataclass

from django.conf import settings

from apps.core.shared_state import SharedStateUnavailable
from apps.gateway.db import database
from apps.gateway.errors import GatewayError
from apps.gateway.policy import policy_for
from apps.gateway.principals import (
    Principal,
    session_key_end,
    session_key_mint,
    session_mark_ended,
    store_unavailable,
)

JSON_HEADERS = [(b"content-type", b"application/json")]


async def _respond(send, payload: dict, status: int = 200) -> None:
    await send({"type": "http.response.start", "status": status, "headers": JSON_HEADERS})
    await send({"type": "http.response.body", "body": json.dumps(payload).encode()})


def _text(body: dict, name: str, *, required: bool = False, limit: int = 200) -> str:
    value = body.get(name)
    if value is None or value == "":
        if required:
            raise GatewayError(422, f"{name} is required", "invalid_request", field=name)
        return ""
    if not isinstance(value, str) or len(value) > limit or "\x00" in value:  # PostgreSQL text cannot hold NUL
        raise GatewayError(
            422, f"{name} must be a string of at most {limit} characters", "invalid_request", field=name
        )
    return value


def _open_session(principal, task_id: str, group_size: int | None, group_id: str) -> tuple[str, str]:
    from apps.trajectories.services import trajectory_open_rl_session

    trajectory = trajectory_open_rl_session(
        tenant_id=principal.tenant_id,
        task_id=task_id,
        group_size=group_size,
        group_id=group_id,
        api_key_prefix=principal.key_prefix,
    )
    return trajectory.session_id, trajectory.group_id


def _discard_session(tenant_id: int, session_id: str) -> None:
    from apps.trajectories.services import trajectory_discard_unstarted

    trajectory_discard_unstarted(tenant_id=tenant_id, session_id=session_id)


def _training_capacity(tenant_id) -> int | None:
    from apps.training.online import online_capacity

    found = online_capacity(tenant_id=tenant_id)
    return None if found is None else found[0]


async def _take_session_start(gateway, principal) -> None:
    """Each start opens a trajectory under a lock on the tenant row: a flood would stall the tenant's other work."""
    limit = settings.AREAL_GATEWAY_SESSION_STARTS_PER_MINUTE or None
    try:
        await gateway.counters.reserve(
            tenant_id=principal.tenant_id, kind="session_starts", amount=1, limit=limit
        )
    except GatewayError as refused:
        raise GatewayError(
            429,
            f"rate limit: {limit} session starts per minute for this tenant; retry in "
            f"{refused.retry_after} s",
            "rate_limit_sessions",
            retry_after=refused.retry_after,
        ) from None
    policy = await policy_for(principal.tenant_id)
    await gateway.counters.reserve(
        tenant_id=principal.tenant_id, kind="rpm", amount=1, limit=policy.rate_limit_rpm
    )


async def handle_start_session(gateway, scope, receive, send, headers, session_from_path):
    principal, _ = await gateway.authorize(headers, "inference")
    if principal.session_id:
        raise GatewayError(
            409,
            "this key is already bound to a session; start sessions with the tenant's API key",
            "session_key_not_allowed",
        )
    body = await gateway.read_json(receive)  # a refused body (422) takes nothing from the rate budget
    task_id = _text(body, "task_id") or "task-" + uuid.uuid4().hex[:12]
    group_size = body.get("group_size")
    if group_size is not None and (
        isinstance(group_size, bool) or not isinstance(group_size, int) or not 1 <= group_size <= 1024
    ):
        raise GatewayError(
            422, "group_size must be an integer between 1 and 1024", "invalid_request", field="group_size"
        )
    group_id = _text(body, "group_id")  # the caller's own group of comparable tasks (GRPO's baseline)
    if group_id and group_size is not None:
        raise GatewayError(
            422,
            "give group_id or group_size, not both: group_size numbers the task's groups itself",
            "invalid_request",
            field="group_id",
        )
    await _take_session_start(gateway, principal)
    capacity = await database(_training_capacity)(principal.tenant_id)
    if capacity is not None and capacity <= 0:  # AReaL's staleness budget of the tenant's online run
        raise GatewayError(
            429,
            "no training capacity: more sessions now would exceed the online run's staleness "
            "bound; retry later",
            "no_training_capacity",
            retry_after=1,
        )
    session_id, group_id = await database(_open_session)(principal, task_id, group_size, group_id)
    try:
        key = await database(session_key_mint)(
            principal=principal, session_id=session_id, task_id=task_id, group_id=group_id
        )
    except SharedStateUnavailable as error:
        await database(_discard_session)(principal.tenant_id, session_id)  # no key, no session: nothing open
        raise store_unavailable(error) from None
    state = gateway.sessions.get(principal.tenant_id, session_id)
    state.task_id, state.group_id = task_id, group_id
    payload = {"session_id": session_id, "api_key": key, "task_id": task_id}
    if group_id:
        payload["group_id"] = group_id
    await _respond(send, payload)


@dataclass(frozen=True)
class RlSession:
    """The session a set_reward / end_session call acts on, in the caller's tenant."""

    principal: Principal
    raw_key: str
    session_id: str
    # Where the session's rewards go (apps.rewards.selectors.reward_session_target): its newest trajectory,
    # the continuation once a late step went on after its trajectory ended.
    trajectory_id: uuid.UUID
    trajectory_ids: tuple[uuid.UUID, ...]  # every trajectory of the session, oldest first
    ended: bool
    # The shared cursor's last step and its stored trajectory, when the call asked for it (`last_step`).
    cursor_step: tuple[str, uuid.UUID] | None = None


def _session_target(tenant_id: int, session_id: str):
    from apps.rewards.selectors import reward_session_target

    return reward_session_target(tenant_id=tenant_id, session_id=session_id)


def _stored_step_trajectory(tenant_id: int, step_id: str) -> uuid.UUID | None:
    """The trajectory of the tenant's stored step `step_id`; None while it is not in the database."""
    from apps.trajectories.selectors import step_trajectory_id

    try:
        step_uuid = uuid.UUID(step_id)
    except ValueError:
        return None
    return step_trajectory_id(tenant_id=tenant_id, step_id=step_uuid)


async def _wait_until_stored(tenant_id: int, step_id: str) -> uuid.UUID:
    """The trajectory of `step_id` once the step is in the database. A step is journalled by the web process
    that served it and stored by that process's flusher within about AREAL_JOURNAL_FLUSH_MS (this process's
    own journal was flushed by `_rl_session`); this waits for it up to AREAL_GATEWAY_REWARD_STEP_WAIT_MS,
    then answers 503 `completion_not_recorded` with Retry-After (nothing is stored)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.AREAL_GATEWAY_REWARD_STEP_WAIT_MS / 1000
    pause = min(max(settings.AREAL_JOURNAL_FLUSH_MS / 1000, 0.01), 0.25)
    while True:
        trajectory_id = await database(_stored_step_trajectory)(tenant_id, step_id)
        if trajectory_id is not None:
            return trajectory_id
        if loop.time() >= deadline:
            raise GatewayError(
                503,
                f"the session's last completion {step_id} is not in the database yet (the web process that "
                "served it has not stored it); retry",
                "completion_not_recorded",
                retry_after=1,
            )
        await asyncio.sleep(pause)


async def _cursor_step(gateway, tenant_id: int, session_id: str) -> tuple[str, uuid.UUID] | None:
    """The session's last completion whichever web process served it: the last step of its shared cursor
    (sessions.py; a retry's step replaces the attempt it repeats; this process's memory may be behind), with
    its trajectory once it is stored (`_wait_until_stored`). None without a cursor (none within
    AREAL_GATEWAY_CONVERSATION_TTL_SECONDS, or the shared state unreadable and this process served none)."""
    state = await gateway.sessions.resume(tenant_id, session_id)
    if not state.last_step_id:
        return None
    step_id = state.last_step_id
    return step_id, await _wait_until_stored(tenant_id, step_id)


async def _rl_session(gateway, headers, session_from_path, body, *, last_step: bool = False) -> RlSession:
    """The session key's own session, or the one a tenant key names (path, else body `session_id`). With
    `last_step`, the shared cursor's last step is waited for first: a late step still in another process's
    journal may be what opens the continuation the session's rewards go to."""
    principal, raw = await gateway.authorize(headers, "inference")
    named = session_from_path or _text(body, "session_id")
    if principal.session_id:
        if named and named != principal.session_id:
            raise GatewayError(
                409,
                "this session key is bound to another session: name none, or the key's own",
                "session_mismatch",
                field="session_id",
            )
        named = principal.session_id
    elif not named:
        raise GatewayError(
            400,
            "name the session: use the session key returned by /rl/start_session, or the tenant key with "
            "/v1/<session_id>/rl/..., /s/<session_id>/rl/... or session_id in the body",
            "session_key_required",
        )
    if len(named) > 200 or "\x00" in named:
        raise GatewayError(400, "session ids are at most 200 characters", "invalid_session_id")
    await gateway.journal.flush()  # a session whose only completion is still in the journal exists
    cursor_step = await _cursor_step(gateway, principal.tenant_id, named) if last_step else None
    target = await database(_session_target)(principal.tenant_id, named)
    if target is None:  # the same answer whether another tenant has a session of that name or nobody does
        raise GatewayError(404, f"no session {named!r} in this tenant", "session_not_found")
    ended = not target.is_open or gateway.sessions.get(principal.tenant_id, named).ended
    return RlSession(
        principal, raw, named, target.trajectory_id, target.trajectory_ids, ended, cursor_step=cursor_step
    )


def _last_step_id(session: RlSession) -> str | None:
    """The completion a reward without an interaction id goes to: the shared cursor's last step when it is
    in the session's newest trajectory (the reward's trajectory), else that trajectory's newest stored step;
    None when it has none."""
    from apps.trajectories.selectors import step_last_id

    if session.cursor_step is not None and session.cursor_step[1] == session.trajectory_id:
        return session.cursor_step[0]
    last = step_last_id(tenant_id=session.principal.tenant_id, trajectory_id=session.trajectory_id)
    return str(last) if last else None


def _step_trajectory_in_session(session: RlSession, step_id: str) -> uuid.UUID | None:
    """The trajectory of `step_id` when it is one of the session's steps (in any of its trajectories)."""
    trajectory_id = _stored_step_trajectory(session.principal.tenant_id, step_id)
    return trajectory_id if trajectory_id in session.trajectory_ids else None


def _reward_value(raw, field: str = "reward") -> float:
    if isinstance(raw, bool):
        return float(raw)
    if not isinstance(raw, int | float) or not math.isfinite(raw):
        raise GatewayError(422, f"{field} must be a finite number", "invalid_request", field=field)
    return float(raw)


def _interaction_id(body: dict) -> str:
    """`interaction_id`, or `completion_id` as AReaL's oldest client names it."""
    interaction_id = _text(body, "interaction_id")
    completion_id = _text(body, "completion_id")
    if interaction_id and completion_id and interaction_id != completion_id:
        raise GatewayError(
            422, "interaction_id and completion_id name different completions", "invalid_request"
        )
    return interaction_id or completion_id


def _set_reward(
    session: RlSession, *, trajectory_id: uuid.UUID, step_id: str | None, value: float, timing: str
) -> dict:
    from apps.rewards.services import reward_set_for_interaction

    return reward_set_for_interaction(
        tenant_id=session.principal.tenant_id,
        trajectory_id=trajectory_id,
        step_id=step_id,
        value=value,
        timing=timing,
        created_by=session.principal.key_prefix,
    )


async def handle_set_reward(gateway, scope, receive, send, headers, session_from_path):
    body = await gateway.read_json(receive)
    value = _reward_value(body.get("reward"))
    interaction_id = _interaction_id(body)
    session = await _rl_session(gateway, headers, session_from_path, body, last_step=not interaction_id)
    if session.ended:
        raise GatewayError(410, f"session {session.session_id} has ended", "session_ended")
    if interaction_id:  # pinned to the interaction's own trajectory, whichever of the session's it is
        trajectory_id = await database(_step_trajectory_in_session)(session, interaction_id)
        if trajectory_id is None:
            raise GatewayError(
                404,
                f"no interaction {interaction_id!r} in session {session.session_id}",
                "interaction_not_found",
                field="interaction_id",
            )
        step_id: str | None = interaction_id
    else:
        trajectory_id, step_id = session.trajectory_id, await database(_last_step_id)(session)
    if not step_id:
        raise GatewayError(404, "this session has no completion to reward yet", "no_completion")
    reward = await database(_set_reward)(
        session, trajectory_id=trajectory_id, step_id=step_id, value=value, timing="immediate"
    )
    await _respond(
        send,
        {
            "status": "ok",
            "reward_id": reward["reward_id"],
            "interaction_id": step_id,
            "created": reward["created"],
            "replaces": reward["replaces"],
        },
    )


def _end(session: RlSession) -> tuple[int, int]:
    """(steps, interactions) of the session's trajectory, which is now complete."""
    from apps.tenants.models import Tenant
    from apps.trajectories.choices import StepKind
    from apps.trajectories.selectors import step_count
    from apps.trajectories.services import trajectory_end

    tenant = Tenant.objects.get(pk=session.principal.tenant_id)
    trajectory = trajectory_end(tenant=tenant, trajectory_id=session.trajectory_id)
    interactions = step_count(tenant=tenant, trajectory_id=trajectory.pk, kind=StepKind.LLM_CALL)
    return trajectory.step_count, interactions


async def handle_end_session(gateway, scope, receive, send, headers, session_from_path):
    body = await gateway.read_json(receive, allow_empty=True)
    final = body.get("final_reward")
    final_reward = None if final is None else _reward_value(final, "final_reward")
    session = await _rl_session(gateway, headers, session_from_path, body, last_step=final_reward is not None)
    if session.ended:
        raise GatewayError(410, "this session has already ended", "session_ended")
    state = gateway.sessions.get(session.principal.tenant_id, session.session_id)
    reward = None
    if final_reward is not None:  # recorded before the end: a refused one (422) ends nothing
        step_id = await database(_last_step_id)(session)
        reward = await database(_set_reward)(
            session,
            trajectory_id=session.trajectory_id,
            step_id=step_id,
            value=final_reward,
            timing="terminal",
        )
    steps, interactions = await database(_end)(session)
    state.ended = True
    try:
        if session.principal.session_id:
            await database(session_key_end)(session.raw_key)
        await database(session_mark_ended)(
            tenant_id=session.principal.tenant_id, session_id=session.session_id
        )
    except SharedStateUnavailable as error:
        raise store_unavailable(error) from None
    payload = {
        "status": "ok",
        "session_id": session.session_id,
        "steps": steps,
        "interaction_count": interactions,
    }
    if reward is not None:
        payload["final_reward"] = {
            "reward_id": reward["reward_id"],
            "target": reward["target"],
            "step_id": reward["step_id"],
            "value": reward["value"],
        }
    await _respond(send, payload)


def _append(
    principal, *, session_id, step_id, value, kind, source, comment, idempotency_key, timing, spec_name=""
) -> dict:
    from apps.rewards.services import reward_append_for_agent

    return reward_append_for_agent(
        tenant_id=principal.tenant_id,
        session_id=session_id,
        step_id=step_id,
        value=value,
        kind=kind,
        source=source,
        label=comment,
        idempotency_key=idempotency_key,
        timing=timing,
        created_by=principal.key_prefix,
        spec_name=spec_name,
    )


async def handle_rewards(gateway, scope, receive, send, headers, session_from_path):
    principal, _ = await gateway.authorize(headers, "rewards:write")
    body = await gateway.read_json(receive)
    targets = [name for name in ("session_id", "step_id", "interaction_id") if body.get(name)]
    if len(targets) != 1:
        raise GatewayError(
            422, "give exactly one of session_id, step_id or interaction_id", "invalid_request"
        )
    # A correction (critique) or a category named by label needs no value; the reward spec maps or checks it.
    value = (
        None
        if body.get("value") is None and (body.get("label") or body.get("kind") == "critique")
        else (_reward_value(body.get("value"), "value"))
    )
    kind = _text(body, "kind") or None
    source = _text(body, "source") or "agent"
    if kind is not None and kind not in {"numeric", "boolean", "categorical", "critique"}:
        raise GatewayError(
            422, "kind must be numeric, boolean, categorical or critique", "invalid_request", field="kind"
        )
    if source not in {"user", "agent", "environment", "rule"}:
        raise GatewayError(
            422,
            "source must be user, agent, environment or rule through this endpoint",
            "invalid_request",
            field="source",
        )
    comment = _text(body, "comment", limit=20000) or _text(body, "label", limit=20000)
    spec_name = _text(body, "spec", limit=120)
    idempotency_key = _text(body, "idempotency_key") or None
    await gateway.journal.flush()
    step_id = body.get("step_id") or body.get("interaction_id")
    if step_id and not isinstance(step_id, str):
        raise GatewayError(422, "step_id must be a string", "invalid_request", field="step_id")
    reward = await database(_append)(
        principal,
        session_id=body.get("session_id"),
        step_id=step_id,
        value=value,
        kind=kind,
        source=source,
        comment=comment,
        idempotency_key=idempotency_key,
        timing=_text(body, "timing") or "delayed",
        spec_name=spec_name,
    )
    await _respond(send, reward, status=201 if reward.pop("created") else 200)
