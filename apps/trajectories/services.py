"""Writes to trajectories and steps. Steps are only ever inserted; trajectories get appended totals,
status changes and session metadata."""

import logging
import uuid
from datetime import datetime
from decimal import Decimal

from django.db import IntegrityError, connection, models, transaction
from django.db.models import F, Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from apps.audit.services import audit_record
from apps.tenants.models import Tenant
from apps.trajectories import importing
from apps.trajectories.lifecycle import late_step_target, session_trajectory_end
from apps.trajectories.models import EndReason, Step, Trajectory, TrajectoryStatus, trajectory_id_for
from workers.atdp.tokens import pack_floats, pack_ids, pack_versions

logger = logging.getLogger(__name__)

STEP_FIELDS = (
    "parent_step_id",
    "retry_of",
    "kind",
    "endpoint",
    "observation",
    "state",
    "action",
    "result",
    "tokenizer",
    "served_model",
    "model_version",
    "policy_version",
    "backend_name",
    "prompt_tokens",
    "completion_tokens",
    "latency_ms",
    "ttft_ms",
    "scopes",
    "pii_entities",
    "aborted",
    "error",
    "retokenized",  # a gateway step without token data (a text-only answer)
)


class StepRefused(IntegrityError):
    """A journalled step cannot be attributed: its trajectory id (or step id) is held by a row of another
    tenant, or its session was imported under another id. An IntegrityError, so the journal sets the record
    aside (apps.gateway.journal: rejected.jsonl) instead of blocking later steps; it is never attached to a
    row it does not own."""


def _moment(value) -> datetime:
    if isinstance(value, datetime):
        return value
    if not value:
        return timezone.now()
    moment = parse_datetime(value)
    if moment is None:  # records are validated (ATDP date-time) or written by the gateway: never
        raise ValueError(f"not a date-time: {value!r}")
    return moment


def _step_row(record: dict, *, trajectory_id, index: int) -> Step:
    tokens = record.get("tokens") or {}
    row = Step(
        id=uuid.UUID(record["step_id"]),
        tenant_id=record["tenant_id"],
        trajectory_id=trajectory_id,
        index=index,
        cost_usd=Decimal(str(record.get("cost_usd") or 0)),
        created_at=_moment(record.get("created_at")),
        **{field: record[field] for field in STEP_FIELDS if field in record},
    )
    if tokens.get("completion_ids") is not None:
        row.prompt_ids = pack_ids(tokens.get("prompt_ids") or [])
        row.completion_ids = pack_ids(tokens["completion_ids"])
        row.completion_logprobs = pack_floats(tokens.get("completion_logprobs") or [])
        row.completion_versions = pack_versions(tokens.get("completion_versions") or [])
    return row


def _trajectory_row(record: dict, trajectory_id) -> Trajectory:
    return Trajectory(
        id=trajectory_id,
        tenant_id=record["tenant_id"],
        session_id=record["session_id"],
        api_key_prefix=record.get("api_key_prefix", ""),
        task_id=record.get("task_id") or "",
        group_id=record.get("group_id") or "",
        purpose=record.get("purpose", "production"),
        consent=record.get("consent", "full"),
        agent_name=record.get("agent_name", ""),
        agent_version=record.get("agent_version", ""),
        started_at=_moment(record.get("created_at")),
        retention_until=_moment(record["retention_until"]) if record.get("retention_until") else None,
        continues_id=record.get("continues"),
    )


def _totals(batch: list[dict]) -> dict:
    return {
        "step_count": len(batch),
        "prompt_tokens": sum(record.get("prompt_tokens", 0) for record in batch),
        "completion_tokens": sum(record.get("completion_tokens", 0) for record in batch),
        "latency_ms": sum(record.get("latency_ms", 0) for record in batch),
        "cost_usd": sum(Decimal(str(record.get("cost_usd") or 0)) for record in batch),
    }


def _create_trajectories(by_trajectory: dict, new_ids: list) -> bool:
    """Inserts the batch's new trajectories with their totals already counted. False when another writer
    created one of them meanwhile (nothing is inserted then)."""
    rows = []
    for trajectory_id in new_ids:
        row = _trajectory_row(by_trajectory[trajectory_id][0], trajectory_id)
        for field, value in _totals(by_trajectory[trajectory_id]).items():
            setattr(row, field, value)
        rows.append(row)
    try:
        with transaction.atomic():
            _rows_insert(Trajectory, rows)
    except IntegrityError:
        return False
    return True


def _storable(value):
    """`value` with every NUL character in its strings replaced by U+FFFD: PostgreSQL's text and jsonb cannot
    hold NUL, which a small model can generate. Token ids keep what was generated. Lists of numbers (token ids,
    logprobs) are passed through without a look, to keep the flusher cheap."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    if isinstance(value, dict):
        return {key: _storable(item) for key, item in value.items()}
    if isinstance(value, list) and value and isinstance(value[0], (str, dict, list)):
        return [_storable(item) for item in value]
    return value


def _grouped(records: list[dict]) -> tuple[dict, dict]:
    """(records by the trajectory id their session derives, the tenant owning each id). Raises StepRefused
    when records of two tenants derive one id."""
    by_trajectory: dict[uuid.UUID, list[dict]] = {}
    for record in records:
        trajectory_id = trajectory_id_for(tenant_id=record["tenant_id"], session_id=record["session_id"])
        by_trajectory.setdefault(trajectory_id, []).append(record)
    owners = {trajectory_id: batch[0]["tenant_id"] for trajectory_id, batch in by_trajectory.items()}
    if any(
        record["tenant_id"] != owners[trajectory_id]
        for trajectory_id, batch in by_trajectory.items()
        for record in batch
    ):
        raise StepRefused("records of two tenants derive the same trajectory id")
    return by_trajectory, owners


def _to_continuation(batch: list[dict], ended: Trajectory) -> None:
    """Moves late steps (their session's trajectory has ended) to the session's continuation: the open one,
    or a new one continuing the last ended trajectory (apps/trajectories/lifecycle.py)."""
    session_id, continues = late_step_target(ended)
    for record in batch:
        record["session_id"] = session_id
        record["continues"] = continues
    logger.info(
        "%d late step(s) of ended trajectory %s (session %s) go to %s",
        len(batch),
        ended.pk,
        ended.session_id,
        session_id,
    )


def _lock_attributed(records: list[dict]) -> tuple[dict, dict, dict]:
    """Groups the records by trajectory and locks the existing trajectories in primary-key order. A record
    whose trajectory has ended is moved to its session's continuation and the grouping done again, so no
    step ever joins an ended trajectory. Returns (records by trajectory id, owner tenant by id, locked rows
    by id). Tenancy: a row of another tenant under a derived id raises StepRefused."""
    for _ in range(3):  # the continuations found are open and locked, so a second pass settles
        by_trajectory, owners = _grouped(records)
        existing = {}
        for row in (
            Trajectory.objects.select_for_update()
            .filter(id__in=by_trajectory)
            .order_by("id")
            .only("id", "tenant_id", "step_count", "status", "session_id", "continues_id")
        ):
            if row.tenant_id != owners[row.id]:
                raise StepRefused(f"trajectory {row.id} belongs to another tenant")
            existing[row.id] = row
        ended = [row for row in existing.values() if row.status != TrajectoryStatus.OPEN]
        if not ended:
            return by_trajectory, owners, existing
        for row in ended:
            _to_continuation(by_trajectory[row.id], row)
    raise StepRefused("the continuation of an ended session could not be settled")


def _rows_insert(model, rows: list) -> None:
    """Inserts new rows of the flusher's tables (steps, trajectories). On PostgreSQL through COPY: the
    gateway's flusher stores every step it journals, and an INSERT of a batch had psycopg quote every value,
    token arrays included, into the statement's text on the web process (Django binds parameters
    client-side). COPY streams the same values, each prepared by its field as `bulk_create` prepares it.
    Elsewhere (SQLite, the laptop path): `bulk_create`. Either way one statement: a duplicate key fails the
    whole batch with Django's IntegrityError, and the caller's transaction rolls it back."""
    if connection.vendor != "postgresql":
        model.objects.bulk_create(rows)
        return
    fields = model._meta.concrete_fields
    quote = connection.ops.quote_name
    columns = ", ".join(quote(str(field.column)) for field in fields)
    statement = f"COPY {quote(model._meta.db_table)} ({columns}) FROM STDIN"
    # the raw psycopg cursor's errors, raised as Django's (IntegrityError, DataError) as an INSERT's would be
    with (
        connection.cursor() as cursor,
        connection.wrap_database_errors,
        cursor.cursor.copy(statement) as copy,
    ):
        plan = _copy_plan(model)
        for row in rows:
            copy.write_row([_copy_value(row, field, kept_as_is) for field, kept_as_is in plan])


# Field classes whose value goes into a PostgreSQL COPY as it is when it has one of these exact types: for them
# `get_db_prep_save` would return the same value (a str for text, an int for an integer, a UUID for PostgreSQL's
# native uuid, an aware datetime for timestamptz), and calling it for every field of every row was the largest
# share of the recorder's CPU (bench/gateway). Every other field (JSON, binary, decimal), and any other value,
# is prepared by its field.
_AS_IS_TYPES: dict[type, tuple[type, ...]] = {
    models.CharField: (str,),
    models.BooleanField: (bool,),
    models.IntegerField: (int,),
    models.PositiveIntegerField: (int,),
    models.BigIntegerField: (int,),
    models.PositiveBigIntegerField: (int,),
    models.UUIDField: (uuid.UUID,),
    models.DateTimeField: (datetime,),
}
_copy_plans: dict[type, list] = {}


def _copy_plan(model) -> list[tuple]:
    """(field, the value types it takes as they are) for each concrete field of `model`."""
    plan = _copy_plans.get(model)
    if plan is None:
        plan = []
        for field in model._meta.concrete_fields:
            target = field.target_field if field.is_relation else field
            auto = getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False)
            plan.append((field, () if auto else _AS_IS_TYPES.get(type(target), ())))
        _copy_plans[model] = plan
    return plan


def _copy_value(row, field, kept_as_is: tuple[type, ...]):
    if kept_as_is:
        value = getattr(row, field.attname)
        if value is None or (
            type(value) in kept_as_is and (type(value) is not datetime or value.tzinfo is not None)
        ):
            return value
    return field.get_db_prep_save(field.pre_save(row, True), connection)


@transaction.atomic
def steps_ingest(*, records: list[dict]) -> int:
    """Inserts journalled step records; returns how many were new. Idempotent: a record whose step id
    this tenant already stored is skipped, so replaying a journal after a crash never duplicates a step or
    its totals. Trajectories new to the database are inserted with their totals in one statement; existing
    ones are locked in primary-key order while indexes are assigned (in causal order: _in_causal_order) and their
    totals move with F() increments.

    Tenancy: a step only ever joins a trajectory of its own record's tenant. A trajectory or step id held by
    another tenant's row raises StepRefused (the whole batch rolls back; the journal isolates the record)."""
    if not records:
        return 0
    records = [_storable(record) for record in records]
    stored = dict(
        Step.objects.filter(id__in=[record["step_id"] for record in records]).values_list("id", "tenant_id")
    )
    for record in records:
        owner = stored.get(uuid.UUID(record["step_id"]))
        if owner is not None and owner != record["tenant_id"]:
            raise StepRefused(f"step id {record['step_id']} is stored for another tenant")
    fresh = [record for record in records if uuid.UUID(record["step_id"]) not in stored]
    if not fresh:
        return 0
    by_trajectory, owners, existing = _lock_attributed(fresh)
    new_ids = [trajectory_id for trajectory_id in by_trajectory if trajectory_id not in existing]
    if new_ids and not _create_trajectories(by_trajectory, new_ids):
        # A concurrent writer created some of them: create the rest empty and count everything as existing.
        Trajectory.objects.bulk_create(
            [_trajectory_row(by_trajectory[trajectory_id][0], trajectory_id) for trajectory_id in new_ids],
            ignore_conflicts=True,
        )
        by_trajectory, owners, existing = _lock_attributed(fresh)
        new_ids = []
        missing = [trajectory_id for trajectory_id in by_trajectory if trajectory_id not in existing]
        if missing:  # the session is taken by a trajectory under another id (an imported one)
            raise StepRefused(f"the session of trajectory {missing[0]} is stored under another id")
    created = set(new_ids)
    rows: list[Step] = []
    for trajectory_id, batch in by_trajectory.items():
        start = 0 if trajectory_id in created else existing[trajectory_id].step_count
        rows.extend(
            _step_row(record, trajectory_id=trajectory_id, index=start + offset)
            for offset, record in enumerate(batch)
        )
        if trajectory_id not in created:
            Trajectory.objects.filter(id=trajectory_id, tenant_id=owners[trajectory_id]).update(
                **{field: F(field) + value for field, value in _totals(batch).items()}
            )
    # Stored steps only move up: the highest first, each into a place vacated or never held (index is unique).
    for step in sorted(
        _in_causal_order(rows, existing=set(existing) - created), key=lambda step: -step.index
    ):
        Step.objects.filter(pk=step.pk).update(index=step.index)
    _rows_insert(Step, rows)
    return len(rows)


def _in_causal_order(rows: list[Step], *, existing: set) -> list[Step]:
    """Indexes keep the order steps were created in (ATDP: steps in causal order), not the order they reach
    the database: each web process flushes its own journal, so a turn served on one process can be stored
    after a later turn of the same session (a retry of it, say) that another process served. A new step
    created before steps already stored takes its place among them and they move up; the stored steps keep
    their own order. Returns the stored steps whose index changed (none on the ordinary path, which costs
    one query per batch that joins existing trajectories)."""
    joining: dict = {}
    for row in rows:
        if row.trajectory_id in existing:
            joining.setdefault(row.trajectory_id, []).append(row)
    if not joining:
        return []
    first_new = {
        trajectory_id: min(row.created_at for row in fresh) for trajectory_id, fresh in joining.items()
    }
    late = {
        trajectory_id
        for trajectory_id, created_at in Step.objects.filter(
            trajectory_id__in=list(joining), created_at__gt=min(first_new.values())
        ).values_list("trajectory_id", "created_at")
        if created_at > first_new[trajectory_id]
    }
    moved = []
    for trajectory_id in late:
        sequence = list(
            Step.objects.filter(trajectory_id=trajectory_id)
            .only("id", "index", "created_at")
            .order_by("index")
        )
        stored = {step.pk: step.index for step in sequence}
        for row in joining[trajectory_id]:
            position = next(
                (at for at, step in enumerate(sequence) if step.created_at > row.created_at), len(sequence)
            )
            sequence.insert(position, row)
        for index, step in enumerate(sequence):
            step.index = index
            if step.pk in stored and stored[step.pk] != index:
                moved.append(step)
    return moved


@transaction.atomic
def trajectory_open(
    *,
    tenant: Tenant,
    session_id: str,
    task_id: str = "",
    group_id: str = "",
    api_key_prefix: str = "",
    purpose: str = "production",
    consent: str = "full",
) -> Trajectory:
    """Creates the trajectory of an explicitly started session (idempotent on the session). Tenancy: only a
    row of `tenant` is ever returned; an id held by another tenant raises IntegrityError."""
    trajectory, _ = Trajectory.objects.get_or_create(
        id=trajectory_id_for(tenant_id=tenant.pk, session_id=session_id),
        tenant=tenant,
        defaults={
            "session_id": session_id,
            "task_id": task_id,
            "group_id": group_id,
            "api_key_prefix": api_key_prefix,
            "purpose": purpose,
            "consent": consent,
        },
    )
    return trajectory


@transaction.atomic
def trajectory_open_rl_session(
    *, tenant_id: int, task_id: str, group_size: int | None, api_key_prefix: str, group_id: str = ""
) -> Trajectory:
    """Opens the trajectory of a new RL session (`/rl/start_session`) under a fresh session id `rl-<hex>`.
    With `group_size`, the session joins the task's group `<task_id>#<n>`, n being how many trajectories of
    the task the tenant had started, divided by `group_size`; otherwise it joins `group_id`, the caller's own
    group (empty: none). Locking: the tenant row is locked for the count and the insert, so concurrent starts
    of one tenant are numbered one after another. Tenancy: counts and writes rows of `tenant_id` only. Not
    idempotent: each call opens a new session."""
    tenant = Tenant.objects.select_for_update().get(pk=tenant_id)
    if group_size:
        started = Trajectory.objects.for_tenant(tenant).filter(task_id=task_id).count()
        group_id = f"{task_id}#{started // group_size}"
    return trajectory_open(
        tenant=tenant,
        session_id="rl-" + uuid.uuid4().hex,
        task_id=task_id,
        group_id=group_id,
        api_key_prefix=api_key_prefix,
    )


def trajectory_discard_unstarted(*, tenant_id: int, session_id: str) -> int:
    """Deletes the tenant's trajectory of `session_id` if no step has reached it yet: the rollback of a
    `/rl/start_session` whose session key could not be minted, so the caller, who got an error and no
    session, leaves no open trajectory behind. Returns how many trajectories went (0 or 1)."""
    _, deleted = Trajectory.objects.filter(
        tenant_id=tenant_id, session_id=session_id, status=TrajectoryStatus.OPEN, steps__isnull=True
    ).delete()
    return deleted.get(Trajectory._meta.label, 0)


def trajectory_end(
    *,
    tenant: Tenant,
    trajectory_id,
    status: str = TrajectoryStatus.COMPLETE,
    reason: str = EndReason.AGENT,
) -> Trajectory:
    """Ends the session the trajectory records (`lifecycle.session_trajectory_end`: the trajectory, or its
    open continuation when late steps went on in one), recording `reason`. Idempotent."""
    return session_trajectory_end(tenant=tenant, trajectory_id=trajectory_id, status=status, reason=reason)


def trajectory_import_store(*, tenant: Tenant, record: dict) -> tuple[Trajectory, bool]:
    """Stores the trajectory and steps of one validated ATDP record logged by an agent itself (SDK mode), in
    the caller's transaction (apps.loop.importing.trajectory_import adds its rewards and review and audits
    it). Everything the record says is kept (`importing`: token arrays with loss masks, versions,
    permissions, replayability, retention), so its export says the same. Its qualification is not taken:
    this tenant's gates judge it (enqueued on commit when the imported trajectory is ended), on the same
    facts. Its `retention_until` is kept up to this tenant's `retention_days` from now. Returns the
    trajectory and whether its retention was shortened.

    The stored trajectory gets a fresh id; the record's `trajectory_id` is kept as `source_trajectory_id`.
    An importer never chooses a primary key, so it cannot take an id the gateway will derive for another
    tenant's session. Raises ValidationFailed naming the field when the record is another tenant's or a
    value does not fit its column, and Conflict when this tenant already holds the record's id (as an id
    or a source id) or its session; another tenant's rows are never consulted, so the answer reveals
    nothing of them."""
    from apps.core.errors import Conflict, ValidationFailed

    if record.get("tenant") != tenant.slug:
        raise ValidationFailed(
            f"record belongs to tenant {record.get('tenant')!r}, not {tenant.slug!r}",
            fields={"tenant": ["does not match the API key's tenant"]},
        )
    problems = importing.record_problems(record)
    if problems:
        field, problem = next(iter(problems.items()))
        raise ValidationFailed(
            f"{field}: {problem}", fields={path: [message] for path, message in problems.items()}
        )
    source_id = uuid.UUID(record["trajectory_id"])
    if (
        Trajectory.objects.for_tenant(tenant)
        .filter(Q(pk=source_id) | Q(source_trajectory_id=source_id) | Q(session_id=record["session_id"]))
        .exists()
    ):
        raise Conflict("a trajectory with this id or session already exists", code="trajectory_exists")
    retention, retention_shortened = importing.retention_until(
        tenant=tenant, record=record, now=timezone.now()
    )
    trajectory = importing.trajectory_row(tenant=tenant, record=record, retention=retention)
    trajectory.save(force_insert=True)
    steps = record.get("steps") or []
    pii = importing.import_pii(tenant)  # the tenant's PII policy, as the gateway applies it
    Step.objects.bulk_create(
        [importing.step_row(tenant=tenant, trajectory_id=trajectory.pk, step=step, pii=pii) for step in steps]
    )
    return trajectory, retention_shortened


def trajectory_import_audit(
    *, tenant: Tenant, actor, trajectory: Trajectory, record: dict, retention_shortened: bool
) -> None:
    """The `trajectory.import` audit event of a stored import, in its transaction."""
    review = (record.get("governance") or {}).get("review") or {}
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="trajectory.import",
        target=trajectory,
        data={
            "source_trajectory_id": str(uuid.UUID(record["trajectory_id"])),
            "session_id": trajectory.session_id,
            "steps": len(record.get("steps") or []),
            "rewards": len(record.get("rewards") or []),
            "review": review.get("status", "unreviewed"),
            "retention_shortened": retention_shortened,
        },
    )


@transaction.atomic
def trajectory_export_record(*, tenant: Tenant, actor, format: str, filters: dict) -> None:
    """Audits an export (`trajectory.export`) of this tenant's trajectories: its format and filters. Called
    before the stream starts, so an export that fails midway is still on record."""
    audit_record(
        tenant=tenant, actor=actor, verb="trajectory.export", data={"format": format, "filters": filters}
    )
