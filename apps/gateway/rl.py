"""AReaL-compatible session endpoints and the agent-facing reward endpoint.

POST /rl/start_session {task_id, group_size?} → {session_id, api_key, group_id?}: the returned key is
bound to the session; the agent uses it for its completions and for set_reward / end_session. While the
tenant's online run has no capacity left (apps.training.online.online_capacity) it answers 429 + Retry-After.
POST /rl/set_reward {reward, interaction_id?}: no interaction id → the session's last completion.
POST /rl/end_session: the trajectory is complete; later calls with the key answer 410 (until the key expires
from the cache: then 401, like any unknown key).
/rl/start_session is rate limited per tenant (AREAL_GATEWAY_SESSION_STARTS_PER_MINUTE, and the tenant's
requests-per-minute limit): 429 + Retry-After.
POST /v1/rewards {session_id | step_id | interaction_id, value, kind?, source?, comment?, idempotency_key?}.
  spec? names the reward spec to check against (default: the agent's training spec); label? is a category
  or, with kind critique, the correction text ("what it should have said"; no value needed).
"""

import json
import math
import uuid

from django.conf import settings

from apps.gateway.db import database
from apps.gateway.errors import GatewayError
from apps.gateway.policy import policy_for
from apps.gateway.principals import session_key_end, session_key_mint

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


def _open_session(principal, task_id: str, group_size: int | None) -> tuple[str, str]:
    from apps.trajectories.services import trajectory_open_rl_session

    trajectory = trajectory_open_rl_session(
        tenant_id=principal.tenant_id,
        task_id=task_id,
        group_size=group_size,
        api_key_prefix=principal.key_prefix,
    )
    return trajectory.session_id, trajectory.group_id


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
    await _take_session_start(gateway, principal)
    body = await gateway.read_json(receive)
    task_id = _text(body, "task_id") or "task-" + uuid.uuid4().hex[:12]
    group_size = body.get("group_size")
    if group_size is not None and (
        isinstance(group_size, bool) or not isinstance(group_size, int) or not 1 <= group_size <= 1024
    ):
        raise GatewayError(
            422, "group_size must be an integer between 1 and 1024", "invalid_request", field="group_size"
        )
    capacity = await database(_training_capacity)(principal.tenant_id)
    if capacity is not None and capacity <= 0:  # AReaL's staleness budget of the tenant's online run
        raise GatewayError(
            429,
            "no training capacity: more sessions now would exceed the online run's staleness "
            "bound; retry later",
            "no_training_capacity",
            retry_after=1,
        )
    session_id, group_id = await database(_open_session)(principal, task_id, group_size)
    state = gateway.sessions.get(principal.tenant_id, session_id)
    state.task_id, state.group_id = task_id, group_id
    key = await database(session_key_mint)(
        principal=principal, session_id=session_id, task_id=task_id, group_id=group_id
    )
    payload = {"session_id": session_id, "api_key": key, "task_id": task_id}
    if group_id:
        payload["group_id"] = group_id
    await _respond(send, payload)


async def _session_principal(gateway, headers):
    principal, raw = await gateway.authorize(headers, "inference")
    if not principal.session_id:
        raise GatewayError(
            400, "use the session key returned by /rl/start_session for this call", "session_key_required"
        )
    return principal, raw


def _last_step_id(principal, state) -> str | None:
    if state.last_step_id:
        return state.last_step_id
    from apps.trajectories.models import Step, trajectory_id_for

    last = (
        Step.objects.filter(
            tenant_id=principal.tenant_id,
            trajectory_id=trajectory_id_for(tenant_id=principal.tenant_id, session_id=principal.session_id),
        )
        .order_by("-index")
        .values_list("id", flat=True)
        .first()
    )
    return str(last) if last else None


def _reward_value(raw, field: str = "reward") -> float:
    if isinstance(raw, bool):
        return float(raw)
    if not isinstance(raw, int | float) or not math.isfinite(raw):
        raise GatewayError(422, f"{field} must be a finite number", "invalid_request", field=field)
    return float(raw)


async def handle_set_reward(gateway, scope, receive, send, headers, session_from_path):
    principal, _ = await _session_principal(gateway, headers)
    body = await gateway.read_json(receive)
    value = _reward_value(body.get("reward"))
    state = gateway.sessions.get(principal.tenant_id, principal.session_id)
    if state.ended:
        raise GatewayError(410, f"session {principal.session_id} has ended", "session_ended")
    interaction_id = _text(body, "interaction_id")
    await gateway.journal.flush()  # the step being rewarded must be in the database first
    step_id = interaction_id or await database(_last_step_id)(principal, state)
    if not step_id:
        raise GatewayError(404, "this session has no completion to reward yet", "no_completion")
    reward = await database(_append)(
        principal,
        session_id=principal.session_id,
        step_id=step_id,
        value=value,
        kind="numeric",
        source="agent",
        comment="",
        idempotency_key=None,
        timing="immediate",
    )
    await _respond(send, {"status": "ok", "reward_id": reward["reward_id"], "interaction_id": step_id})


def _end(principal) -> None:
    from apps.tenants.models import Tenant
    from apps.trajectories.models import trajectory_id_for
    from apps.trajectories.services import trajectory_end

    tenant = Tenant.objects.get(pk=principal.tenant_id)
    trajectory_end(
        tenant=tenant, trajectory_id=trajectory_id_for(tenant_id=tenant.pk, session_id=principal.session_id)
    )


async def handle_end_session(gateway, scope, receive, send, headers, session_from_path):
    principal, raw = await _session_principal(gateway, headers)
    state = gateway.sessions.get(principal.tenant_id, principal.session_id)
    if state.ended:
        raise GatewayError(410, "this session has already ended", "session_ended")
    await gateway.journal.flush()
    await database(_end)(principal)
    state.ended = True
    await database(session_key_end)(raw)
    await _respond(send, {"status": "ok", "session_id": principal.session_id, "steps": len(state.step_ids)})


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
