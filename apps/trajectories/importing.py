"""ATDP records → rows, for `services.trajectory_import_store` (SDK mode). Django-side only: the record has
already passed `workers.atdp` validation. What a step's columns cannot hold (versions.tools,
versions.prompt_version, versions.gateway, permissions.data_class, pii.redacted, replayable) is kept in
`Step.imported_fields`, so exporting an import gives back what was imported (apps/trajectories/serialize.py).

The schema leaves strings and counts unbounded; the columns are not. `record_problems` names each value
that would not fit (PostgreSQL would refuse the row and take the whole line with it, without saying where),
so the line is refused with its field instead.

PII: an imported step passes the tenant's PII policy as a gateway step does (`step_pii`, the same bounded
`workers.pii` scan of the observation and the action, with the tenant's own patterns): under `redact` its
text is stored redacted, `pii_entities` lists what was found (with what the record declared) and a step with
findings keeps no token arrays (they would still encode the text); under `block` a record with findings, or
one that could not be scanned, is refused by field; `off` stores it as it came."""

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.utils.dateparse import parse_datetime

from apps.core.errors import ValidationFailed
from apps.tenants.models import Tenant
from apps.trajectories.models import Step, Trajectory
from apps.trajectories.retention import tenant_retention_days
from workers.atdp.tokens import pack_floats, pack_ids, pack_versions
from workers.pii import UNSCANNED, CustomPattern, InvalidPattern, Sanitizer, ScanLimits, sanitizer_for

INTEGER_MAX = 2**31 - 1  # PositiveIntegerField
TRAJECTORY_TEXT = {"session_id": 200, "agent.name": 200, "agent.version": 64, "task_id": 200, "group_id": 200}
REVIEW_TEXT = {"governance.review.reviewer": 200}
STEP_TEXT = {"tokens.tokenizer": 80, "versions.model_version": 64}
STEP_INTEGERS = ("index", "cost.prompt_tokens", "cost.completion_tokens", "cost.latency_ms", "cost.ttft_ms")
STEP_USD_BELOW = Decimal(10**6)  # Step.cost_usd: 12 digits, 6 after the point
TRAJECTORY_USD_BELOW = Decimal(10**8)  # Trajectory.cost_usd: 14 digits, 6 after the point
REWARD_TEXT = {"created_by": 200, "idempotency_key": 200}
ERROR_CHARS = 500  # Step.error


def _at(value, path: str):
    for key in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _too_long(item: dict, bounds: dict, prefix: str = "") -> dict[str, str]:
    return {
        f"{prefix}{path}": f"at most {limit} characters"
        for path, limit in bounds.items()
        if isinstance(_at(item, path), str) and len(_at(item, path)) > limit
    }


def _usd(cost) -> Decimal:
    return Decimal(str((cost or {}).get("usd") or 0))


def record_problems(record: dict) -> dict[str, str]:
    """Field paths of a valid ATDP `record` whose values do not fit their columns, each with its limit."""
    problems = _too_long(record, TRAJECTORY_TEXT) | _too_long(record, REVIEW_TEXT)
    steps = record.get("steps") or []
    for position, step in enumerate(steps):
        prefix = f"steps[{position}]."
        problems |= _too_long(step, STEP_TEXT, prefix)
        for path in STEP_INTEGERS:
            value = _at(step, path)
            if isinstance(value, int) and value > INTEGER_MAX:
                problems[prefix + path] = f"at most {INTEGER_MAX}"
        if _usd(step.get("cost")) >= STEP_USD_BELOW:
            problems[prefix + "cost.usd"] = f"below {STEP_USD_BELOW}"
    if sum((_usd(step.get("cost")) for step in steps), Decimal(0)) >= TRAJECTORY_USD_BELOW:
        problems["cost.usd"] = f"the steps' costs total {TRAJECTORY_USD_BELOW} or more"
    for position, reward in enumerate(record.get("rewards") or []):
        problems |= _too_long(reward, REWARD_TEXT, f"rewards[{position}].")
    return problems


def moment(value: str) -> datetime:
    """An RFC 3339 date-time of a validated record."""
    parsed = parse_datetime(value)
    if parsed is None:  # the record was validated (ATDP date-time): never
        raise ValueError(f"not a date-time: {value!r}")
    return parsed


def retention_until(*, tenant: Tenant, record: dict, now: datetime) -> tuple[datetime | None, bool]:
    """(the imported trajectory's purge date, whether the tenant's policy shortened it). The record's
    `retention_until` is kept, but never later than the tenant's `retention_days` from now: an import
    cannot keep content longer than the gateway may. None (no date recorded) stays None: the policy then
    counts from `started_at` (apps/trajectories/retention.py)."""
    recorded = (record.get("governance") or {}).get("retention_until")
    if not recorded:
        return None, False
    latest = now + timedelta(days=tenant_retention_days(tenant))
    recorded_moment = moment(recorded)
    return (latest, True) if recorded_moment > latest else (recorded_moment, False)


def trajectory_row(*, tenant: Tenant, record: dict, retention: datetime | None) -> Trajectory:
    """The unsaved trajectory of `record` under a fresh id (the record's id is its `source_trajectory_id`),
    its totals summed over the steps."""
    steps = record.get("steps") or []
    governance = record.get("governance") or {}
    agent = record.get("agent") or {}
    costs = [step.get("cost") or {} for step in steps]
    return Trajectory(
        id=uuid.uuid4(),
        source_trajectory_id=uuid.UUID(record["trajectory_id"]),
        tenant=tenant,
        session_id=record["session_id"],
        agent_name=agent.get("name") or "",
        agent_version=agent.get("version") or "",
        task_id=record.get("task_id") or "",
        group_id=record.get("group_id") or "",
        status=record["status"],
        purpose=record["purpose"],
        consent=governance.get("consent", "full"),
        data_class=governance.get("data_class", "internal"),
        training_use=governance.get("training_use", True),
        started_at=moment(record["started_at"]),
        ended_at=moment(record["ended_at"]) if record.get("ended_at") else None,
        retention_until=retention,
        step_count=len(steps),
        prompt_tokens=sum(cost.get("prompt_tokens") or 0 for cost in costs),
        completion_tokens=sum(cost.get("completion_tokens") or 0 for cost in costs),
        latency_ms=sum(cost.get("latency_ms") or 0 for cost in costs),
        cost_usd=sum((_usd(cost) for cost in costs), Decimal(0)),
    )


def _failure(result: dict) -> tuple[bool, str]:
    """(aborted, error text) from an ATDP `result.error` object, as the gateway's columns keep them for the
    gates and the traffic figures."""
    error = result.get("error")
    if not isinstance(error, dict):
        return False, ""
    text = error.get("message") or error.get("type") or "error"
    return error.get("type") == "aborted", str(text)[:ERROR_CHARS]


@dataclass(frozen=True)
class ImportPii:
    """The tenant's PII policy as an import applies it: `mode` redact | block | off, and the scanner."""

    mode: str
    scanner: Sanitizer | None = None


def import_pii(tenant: Tenant) -> ImportPii:
    """The tenant's PII mode and the scanner the gateway would use for it (its patterns, the same limits:
    AREAL_PII_MAX_SCAN_CHARS, AREAL_PII_PATTERN_TIMEOUT_MS). A tenant without a policy row gets the default
    mode, redact. A stored pattern that no longer compiles refuses the import (as the gateway refuses)."""
    from apps.tenants.models import PiiMode, TenantPolicy

    policy = TenantPolicy.objects.filter(tenant=tenant).first()
    mode = policy.pii_mode if policy is not None else PiiMode.REDACT
    if mode == PiiMode.OFF:
        return ImportPii(mode=mode)
    patterns = tuple(
        CustomPattern(name=item["name"], regex=item["regex"])
        for item in (policy.pii_patterns if policy else [])
    )
    limits = ScanLimits(
        max_chars=settings.AREAL_PII_MAX_SCAN_CHARS,
        custom_seconds=settings.AREAL_PII_PATTERN_TIMEOUT_MS / 1000,
    )
    try:
        return ImportPii(mode=mode, scanner=sanitizer_for(patterns, limits))
    except InvalidPattern as error:
        raise ValidationFailed(
            f"this tenant's PII pattern {error.name!r} is invalid ({error.reason}); an admin must fix it in "
            "the policy before records can be imported",
            code="pii_policy_invalid",
        ) from None


def step_pii(pii: ImportPii, step: dict) -> tuple[object, object, tuple[str, ...], bool]:
    """(observation, action, entities, found) of an ATDP step under the tenant's PII policy (module
    docstring): redacted under `redact`; refused with ValidationFailed (by field) under `block` when anything
    was found or could not be scanned; as they came under `off`. `entities` joins what the record declared;
    `found`: the scan found something here."""
    observation, action = step.get("observation") or {}, step.get("action") or {}
    declared = tuple((step.get("pii") or {}).get("entities") or [])
    if pii.scanner is None:
        return observation, action, declared, False
    redacted_observation, found_in = pii.scanner.scan_value(observation)
    redacted_action, found_out = pii.scanner.scan_value(action)
    found = set(found_in) | set(found_out)
    if pii.mode == "block" and found:
        field = f"steps[{step.get('index')}]"
        reason = (
            "could not be scanned for personal data"
            if UNSCANNED in found
            else (f"contains personal data or secrets ({', '.join(sorted(found))})")
        )
        raise ValidationFailed(
            f"{field} {reason}; this tenant's policy blocks such records",
            fields={field: [reason]},
            code="pii_blocked",
        )
    return redacted_observation, redacted_action, tuple(sorted(found | set(declared))), bool(found)


def step_row(*, tenant: Tenant, trajectory_id, step: dict, pii: ImportPii | None = None) -> Step:
    """The unsaved step of an ATDP `step`, keeping its id (step ids are what rewards and agents name), its
    text passed through the tenant's PII policy (`pii`, read once per record by the caller; read here when
    not given)."""
    pii = pii if pii is not None else import_pii(tenant)
    observation, action, entities, found = step_pii(pii, step)
    tokens = step.get("tokens") or {}
    cost = step.get("cost") or {}
    versions = step.get("versions") or {}
    result = step.get("result") or {}
    aborted, error = _failure(result)
    row = Step(
        id=uuid.UUID(step["step_id"]),
        tenant=tenant,
        trajectory_id=trajectory_id,
        index=step["index"],
        parent_step_id=step.get("parent_step_id"),
        kind=step["kind"],
        observation=observation,
        state=step.get("state") or {},
        action=action,
        result=result,
        tokenizer=tokens.get("tokenizer") or "",
        model_version=versions.get("model_version") or "",
        policy_version=versions.get("policy_version"),
        prompt_tokens=cost.get("prompt_tokens") or 0,
        completion_tokens=cost.get("completion_tokens") or 0,
        latency_ms=cost.get("latency_ms") or 0,
        ttft_ms=cost.get("ttft_ms"),
        cost_usd=_usd(cost),
        scopes=(step.get("permissions") or {}).get("scopes") or [],
        pii_entities=list(entities),
        aborted=aborted,
        error=error,
        created_at=moment(step["created_at"]),
        retokenized=bool(tokens.get("retokenized")) and not found,
        imported_fields={
            "versions": {key: versions.get(key) for key in ("tools", "prompt_version", "gateway")},
            "data_class": (step.get("permissions") or {}).get("data_class", "internal"),
            "pii_redacted": bool((step.get("pii") or {}).get("redacted")) or found,
            "replayable": step.get("replayable"),
        },
    )
    if tokens.get("completion_ids") is not None and not found:  # a redacted step keeps no token arrays
        row.prompt_ids = pack_ids(tokens.get("prompt_ids") or [])
        row.completion_ids = pack_ids(tokens["completion_ids"])
        row.completion_logprobs = pack_floats(tokens.get("completion_logprobs") or [])
        row.completion_versions = pack_versions(tokens.get("completion_versions") or [])
        if tokens.get("loss_mask") is not None:
            row.loss_mask = pack_versions(tokens["loss_mask"])
    return row
