import uuid

from django.db.models import Avg, OuterRef, Prefetch, Q, Subquery, Sum
from django.db.models.functions import Coalesce
from django.http import Http404

from apps.core.errors import NotFound
from apps.core.selectors import get_in_tenant
from apps.tenants.models import Tenant
from apps.trajectories.choices import Purpose, StepKind, TrajectoryStatus
from apps.trajectories.models import Step, Trajectory, trajectory_id_for
from workers.stats import percentile


class TrajectoryNotFound(NotFound, Http404):
    """The API's handler renders it as a domain error; on a console page Django answers its 404 page."""


FILTERS = (
    "session_id",
    "agent",
    "task_id",
    "group_id",
    "status",
    "purpose",
    "reward_min",
    "reward_max",
    "started_after",
    "started_before",
)

# A trajectory's outcome as the browser filters it: a reward of at least 0.5 counts as a success, as the
# overview's success rate counts it (the environments' 0/1 check).
SUCCESS_REWARD = 0.5
OUTCOMES = {
    "succeeded": "succeeded (mean reward ≥ 0.5)",
    "failed": "failed (mean reward < 0.5)",
    "unscored": "no reward yet",
    "errored": "a call failed",
}


def trajectory_list(
    *,
    tenant: Tenant,
    session_id=None,
    agent=None,
    task_id=None,
    group_id=None,
    status=None,
    purpose=None,
    reward_min=None,
    reward_max=None,
    started_after=None,
    started_before=None,
    text=None,
    model_version=None,
    outcome=None,
):
    """Newest first. `reward_min`/`reward_max`: trajectories with at least one reward in that range. `text`:
    a step whose messages, answer or tool results contain it (case-insensitive); `model_version`: a step
    served by that version (its number, "3"); `outcome`: one of OUTCOMES."""
    trajectories = Trajectory.objects.for_tenant(tenant).select_related("tenant")
    exact = {
        "session_id": session_id,
        "agent_name": agent,
        "task_id": task_id,
        "group_id": group_id,
        "status": status,
        "purpose": purpose,
    }
    trajectories = trajectories.filter(**{field: value for field, value in exact.items() if value})
    if started_after:
        trajectories = trajectories.filter(started_at__gte=started_after)
    if started_before:
        trajectories = trajectories.filter(started_at__lt=started_before)
    if reward_min is not None or reward_max is not None:
        # through the rewards' relation (apps.rewards points at trajectories, not the other way): one filter()
        # call, so both bounds hold for the same reward; a subquery, so a trajectory is listed once
        in_range = Q()
        if reward_min is not None:
            in_range &= Q(rewards__value__gte=reward_min)
        if reward_max is not None:
            in_range &= Q(rewards__value__lte=reward_max)
        trajectories = trajectories.filter(pk__in=Trajectory.objects.filter(in_range).values("pk"))
    return trajectories.order_by("-started_at", "-id")


def trajectory_list_with_reward_mean(*, tenant: Tenant, **filters):
    """`trajectory_list` (same filters), each row with `reward_mean`: the mean of its rewards (None without one),
    for the console's browser."""
    return trajectory_list(tenant=tenant, **filters).annotate(reward_mean=Avg("rewards__value"))


# What an ATDP record holds besides the trajectory and its steps belongs to the apps above this one: each
# registers, in its AppConfig.ready(), a `part(tenant) -> Prefetch` (apps.rewards: rewards in creation order;
# apps.qualification: reviews newest first as `reviews_newest_first`, the gates' verdict as
# `tenant_qualification`), so this app imports none of theirs.
_RECORD_PARTS: list = []


def record_part_register(part) -> None:
    """Registers `part(tenant) -> Prefetch`, prefetched by `trajectory_with_records`."""
    if part not in _RECORD_PARTS:
        _RECORD_PARTS.append(part)


def trajectory_with_records(queryset, *, tenant: Tenant):
    """The queryset (of `tenant`'s trajectories) with what an ATDP record holds prefetched (for
    `serialize.trajectory_record`): steps in order and the registered record parts (rewards in creation order,
    ties by id, so two exports agree; reviews newest first, `reviews_newest_first`; the gates' verdict,
    `tenant_qualification`, None before the gates ran). All are read by tenant too, not by trajectory id
    alone: a row of another tenant that names one of these trajectories is never read back."""
    return queryset.filter(tenant=tenant).prefetch_related(
        Prefetch("steps", queryset=step_list(tenant=tenant)), *(part(tenant) for part in _RECORD_PARTS)
    )


def step_list(*, tenant: Tenant, trajectory=None):
    """This tenant's steps in trajectory order (of one `trajectory` when given). The one way to read steps
    of a trajectory: `trajectory.steps` alone would match by trajectory id, whatever the step's tenant."""
    steps = Step.objects.for_tenant(tenant)
    if trajectory is not None:
        steps = steps.filter(trajectory=trajectory)
    return steps.order_by("index")


def step_exists(*, tenant: Tenant, trajectory_id, step_id) -> bool:
    """Whether `step_id` is a step of the tenant's trajectory `trajectory_id` (another tenant's is not)."""
    return Step.objects.for_tenant(tenant).filter(pk=step_id, trajectory_id=trajectory_id).exists()


def step_trajectory_id(*, tenant_id: int, step_id: uuid.UUID) -> uuid.UUID | None:
    """The trajectory of tenant `tenant_id`'s stored step `step_id`; None while no such step is stored."""
    return (
        Step.objects.filter(tenant_id=tenant_id, pk=step_id).values_list("trajectory_id", flat=True).first()
    )


def step_with_agent_name(*, tenant_id: int, step_id: uuid.UUID) -> dict | None:
    """Tenant `tenant_id`'s step `step_id` as {"id", "trajectory_id", "agent_name"} (its trajectory's agent),
    None when the tenant has no such step."""
    row = (
        Step.objects.filter(tenant_id=tenant_id, id=step_id)
        .values("id", "trajectory_id", "trajectory__agent_name")
        .first()
    )
    if row is None:
        return None
    return {
        "id": row["id"],
        "trajectory_id": row["trajectory_id"],
        "agent_name": row["trajectory__agent_name"],
    }


def step_last_id(*, tenant_id: int, trajectory_id) -> uuid.UUID | None:
    """The id of the newest (highest index) stored step of tenant `tenant_id`'s trajectory; None without one."""
    return (
        Step.objects.filter(tenant_id=tenant_id, trajectory_id=trajectory_id)
        .order_by("-index")
        .values_list("id", flat=True)
        .first()
    )


def step_count(*, tenant: Tenant, trajectory_id, kind: str | None = None) -> int:
    """How many steps (of `kind` when given) the tenant's trajectory `trajectory_id` has stored."""
    steps = Step.objects.filter(tenant=tenant, trajectory_id=trajectory_id)
    if kind is not None:
        steps = steps.filter(kind=kind)
    return steps.count()


def production_calls_of_version(
    *, tenant: Tenant, model: str, version: str, since, limit: int
) -> list[tuple]:
    """The newest `limit` model calls of production traffic (eval, replay and annotation sessions left out)
    that `version` of the tenant's `model` served since `since`, newest first, as (trajectory id, error,
    aborted, latency_ms, cost_usd): what a release's guardrails measure per arm."""
    return list(
        Step.objects.for_tenant(tenant)
        .filter(
            kind=StepKind.LLM_CALL,
            served_model=model,
            model_version=version,
            created_at__gte=since,
            trajectory__purpose=Purpose.PRODUCTION,
        )
        .order_by("-created_at")
        .values_list("trajectory_id", "error", "aborted", "latency_ms", "cost_usd")[:limit]
    )


def trajectories_by_id(*, tenant: Tenant, trajectory_ids):
    """The tenant's trajectories among `trajectory_ids` (a queryset, unordered; another tenant's never)."""
    return Trajectory.objects.for_tenant(tenant).filter(pk__in=trajectory_ids)


def trajectory_agent(*, tenant_id: int, trajectory_id) -> dict | None:
    """Tenant `tenant_id`'s trajectory `trajectory_id` as {"id", "agent_name"}; None when the tenant has no
    such trajectory."""
    row = Trajectory.objects.filter(tenant_id=tenant_id, pk=trajectory_id).values("id", "agent_name").first()
    return None if row is None else {"id": row["id"], "agent_name": row["agent_name"]}


def trajectories_since(*, tenant_id: int, since):
    """Tenant `tenant_id`'s trajectories started at or after `since`, aborted ones left out: a queryset."""
    return Trajectory.objects.filter(tenant_id=tenant_id, started_at__gte=since).exclude(
        status=TrajectoryStatus.ABORTED
    )


def rl_sessions_since(*, tenant_id: int, since):
    """Tenant `tenant_id`'s RL sessions (session id `rl-...`, /rl/start_session's) started at or after
    `since`, aborted ones left out: a queryset (an online run counts its capacity over it)."""
    return trajectories_since(tenant_id=tenant_id, since=since).filter(session_id__startswith="rl-")


def trajectory_row_get(*, tenant: Tenant, trajectory_id) -> Trajectory:
    """The tenant's trajectory with its tenant loaded and nothing prefetched (`trajectory_get` reads its
    record too); a missing one, or another tenant's, is NotFound `trajectory_not_found`."""
    return get_in_tenant(
        Trajectory.objects.select_related("tenant"),
        tenant=tenant,
        pk=trajectory_id,
        code="trajectory_not_found",
    )


def trajectory_of_session_get(*, tenant: Tenant, session_id: str) -> Trajectory:
    """The tenant's trajectory of session `session_id` (not its continuations); a missing one is NotFound
    `trajectory_not_found`."""
    return get_in_tenant(Trajectory, tenant=tenant, session_id=session_id, code="trajectory_not_found")


def dangerously_trajectory_lock(trajectory_id) -> Trajectory | None:
    """The trajectory `trajectory_id` of whichever tenant, locked (with its tenant) until the caller's
    transaction ends, or None (a task's entry: the tenant comes from the row; every read after it must be
    scoped to that tenant). Call it inside a transaction."""
    return Trajectory.objects.select_for_update().select_related("tenant").filter(pk=trajectory_id).first()


def trajectory_get(*, tenant: Tenant, trajectory_id) -> Trajectory:
    return get_in_tenant(
        trajectory_with_records(Trajectory.objects.select_related("tenant"), tenant=tenant),
        tenant=tenant,
        pk=trajectory_id,
        code="trajectory_not_found",
        error=TrajectoryNotFound,
    )


def trajectory_lifecycle_get(*, tenant: Tenant, trajectory_id) -> Trajectory:
    """The trajectory (of `tenant`; another tenant's is TrajectoryNotFound) annotated for its session's
    lifecycle: `last_activity_at` (its newest step's time, else `started_at`) and `continued_by_id` (the
    continuation its late steps went to, or None)."""
    newest_step = (
        Step.objects.filter(tenant=tenant, trajectory=OuterRef("pk"))
        .order_by("-created_at")
        .values("created_at")[:1]
    )
    continuation = Trajectory.objects.filter(tenant=tenant, continues=OuterRef("pk")).values("pk")[:1]
    return get_in_tenant(
        Trajectory.objects.annotate(
            last_activity_at=Coalesce(Subquery(newest_step), "started_at"),
            continued_by_id=Subquery(continuation),
        ),
        tenant=tenant,
        pk=trajectory_id,
        code="trajectory_not_found",
        error=TrajectoryNotFound,
    )


def trajectory_ended_at(*, tenant_id: int, trajectory_id):
    """When tenant `tenant_id`'s trajectory `trajectory_id` ended; None while it runs or when the tenant has
    no such trajectory."""
    return (
        Trajectory.objects.filter(tenant_id=tenant_id, pk=trajectory_id)
        .values_list("ended_at", flat=True)
        .first()
    )


def dangerously_trajectory_with_tenant(trajectory_id) -> Trajectory | None:
    """The trajectory `trajectory_id` of whichever tenant, with its tenant loaded (a task's entry: the tenant
    comes from the row), or None. Every read after it must be scoped to that tenant."""
    return Trajectory.objects.select_related("tenant").filter(pk=trajectory_id).first()


SESSION_TRAJECTORY_FIELDS = ("id", "status", "agent_name", "ended_at")


def session_trajectories(*, tenant_id: int, session_id: str) -> list[dict]:
    """The trajectories of tenant `tenant_id`'s session `session_id`, oldest first: the one the session id
    names (its id derives from the session id), then each continuation its late steps opened, following
    `continues` (lifecycle.py). Each as a dict of SESSION_TRAJECTORY_FIELDS. Empty when the tenant has no
    such session; another tenant's rows are never read. One query per trajectory of the chain."""
    from apps.trajectories.lifecycle import MAX_CONTINUATIONS

    rows = Trajectory.objects.filter(tenant_id=tenant_id).values(*SESSION_TRAJECTORY_FIELDS)
    current = rows.filter(pk=trajectory_id_for(tenant_id=tenant_id, session_id=session_id)).first()
    chain: list[dict] = []
    while current is not None and len(chain) <= MAX_CONTINUATIONS:
        chain.append(current)
        current = rows.filter(continues_id=current["id"]).first()
    return chain


def trajectory_import_conflicts(*, tenant: Tenant, record: dict) -> dict[str, str]:
    """Field paths of a valid ATDP `record`'s steps that clash with stored data: a step id already stored (a
    global key, so another tenant's counts too, without saying whose). Empty: no clash. Its rewards are
    checked by apps.rewards (`reward_import_conflicts`)."""
    conflicts = {}
    steps = {uuid.UUID(step["step_id"]): position for position, step in enumerate(record.get("steps") or [])}
    for step_id in Step.objects.filter(id__in=steps).values_list("id", flat=True):
        conflicts[f"steps[{steps[step_id]}].step_id"] = "a step with this id is already stored"
    return conflicts


# ---- overview aggregates (apps.loop.overview, apps.loop.outcomes) -----------------------------------


def step_traffic_per_minute(*, tenant: Tenant, since, limit: int = 200_000) -> list[dict]:
    """Gateway calls recorded since `since`, per minute (oldest first): requests, errors, p50 and p95 latency
    in ms. Reads at most `limit` steps (the newest) so a busy tenant's page stays cheap."""
    rows = (
        Step.objects.for_tenant(tenant)
        .filter(kind="llm_call", created_at__gte=since)
        .order_by("-created_at")
        .values_list("created_at", "latency_ms", "error")[:limit]
    )
    buckets: dict = {}
    for created_at, latency_ms, error in rows:
        bucket = buckets.setdefault(created_at.replace(second=0, microsecond=0), ([], [0]))
        bucket[0].append(latency_ms)
        bucket[1][0] += bool(error)
    minutes = []
    for minute in sorted(buckets):
        latencies, (errors,) = buckets[minute]
        minutes.append(
            {
                "minute": minute,
                "requests": len(latencies),
                "errors": errors,
                "p50_ms": percentile(latencies, 0.5),
                "p95_ms": percentile(latencies, 0.95),
            }
        )
    return minutes


def dangerously_steps_recorded_per_tenant() -> dict[str, int]:
    """Every tenant's recorded step count by tenant slug (the Prometheus endpoint only)."""
    return {
        slug: total or 0
        for slug, total in Trajectory.objects.values("tenant__slug")
        .annotate(total=Sum("step_count"))
        .values_list("tenant__slug", "total")
    }
