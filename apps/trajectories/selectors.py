import uuid

from django.db.models import Avg, Count, Exists, OuterRef, Prefetch, Q, Subquery, Sum
from django.db.models.functions import Coalesce, TruncMinute
from django.http import Http404

from apps.core.errors import NotFound
from apps.core.selectors import get_in_tenant
from apps.qualification.selectors import qualification_rows, review_list
from apps.rewards.models import Reward
from apps.tenants.models import Tenant
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
):
    """Newest first. `reward_min`/`reward_max`: trajectories with at least one reward in that range."""
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
        rewards = Reward.objects.filter(trajectory=OuterRef("pk"))
        if reward_min is not None:
            rewards = rewards.filter(value__gte=reward_min)
        if reward_max is not None:
            rewards = rewards.filter(value__lte=reward_max)
        trajectories = trajectories.filter(Exists(rewards))
    return trajectories.order_by("-started_at", "-id")


def trajectory_list_with_reward_mean(*, tenant: Tenant, **filters):
    """`trajectory_list` (same filters), each row with `reward_mean`: the mean of its rewards (None without one),
    for the console's browser."""
    return trajectory_list(tenant=tenant, **filters).annotate(reward_mean=Avg("rewards__value"))


def trajectory_with_records(queryset, *, tenant: Tenant):
    """The queryset (of `tenant`'s trajectories) with what an ATDP record holds prefetched (for
    `serialize.trajectory_record`): steps in order, rewards in creation order (ties by id, so two exports
    agree), reviews newest first (`reviews_newest_first`) and the gates' verdict (`tenant_qualification`,
    None before the gates ran). All are read by tenant too, not by trajectory id alone: a row of another
    tenant that names one of these trajectories is never read back."""
    return queryset.filter(tenant=tenant).prefetch_related(
        Prefetch("steps", queryset=step_list(tenant=tenant)),
        Prefetch("rewards", queryset=Reward.objects.for_tenant(tenant).order_by("created_at", "id")),
        Prefetch("reviews", queryset=review_list(tenant=tenant), to_attr="reviews_newest_first"),
        Prefetch("qualification", queryset=qualification_rows(tenant=tenant), to_attr="tenant_qualification"),
    )


def step_list(*, tenant: Tenant, trajectory=None):
    """This tenant's steps in trajectory order (of one `trajectory` when given). The one way to read steps
    of a trajectory: `trajectory.steps` alone would match by trajectory id, whatever the step's tenant."""
    steps = Step.objects.for_tenant(tenant)
    if trajectory is not None:
        steps = steps.filter(trajectory=trajectory)
    return steps.order_by("index")


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
    """Field paths of a valid ATDP `record` that clash with stored data, each with its problem: a step or
    reward id already stored (they are global keys, so another tenant's count too, without saying whose),
    or a reward idempotency key this tenant has already used or the record repeats. Empty: no clash."""
    conflicts = {}
    steps = {uuid.UUID(step["step_id"]): position for position, step in enumerate(record.get("steps") or [])}
    for step_id in Step.objects.filter(id__in=steps).values_list("id", flat=True):
        conflicts[f"steps[{steps[step_id]}].step_id"] = "a step with this id is already stored"
    rewards = record.get("rewards") or []
    reward_ids = {uuid.UUID(reward["reward_id"]): position for position, reward in enumerate(rewards)}
    for reward_id in Reward.objects.filter(id__in=reward_ids).values_list("id", flat=True):
        conflicts[f"rewards[{reward_ids[reward_id]}].reward_id"] = "a reward with this id is already stored"
    keys: dict[str, int] = {}
    for position, reward in enumerate(rewards):
        key = reward.get("idempotency_key")
        if key is None:
            continue
        if key in keys:
            conflicts[f"rewards[{position}].idempotency_key"] = (
                f"repeats rewards[{keys[key]}].idempotency_key"
            )
        else:
            keys[key] = position
    used = Reward.objects.filter(tenant=tenant, idempotency_key__in=keys).values_list(
        "idempotency_key", flat=True
    )
    for key in used:
        if key not in keys:  # never: the query names only these keys (the column itself may be null)
            continue
        conflicts[f"rewards[{keys[key]}].idempotency_key"] = (
            "this tenant already stored a reward with this key"
        )
    return conflicts


# ---- overview aggregates (apps.console.dashboard, apps.metrics.outcomes) -----------------------------------


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


def reward_outcomes_per_minute(*, tenant: Tenant, since) -> list[dict]:
    """Rewards (critiques excluded) created since `since`, per minute (oldest first): their count, mean value
    and success rate, where a reward of at least 0.5 counts as a success (the environment's 0/1 check,
    thumbs up)."""
    rows = (
        Reward.objects.for_tenant(tenant)
        .filter(created_at__gte=since)
        .exclude(kind="critique")
        .annotate(minute=TruncMinute("created_at"))
        .values("minute")
        .annotate(
            rewards=Count("id"), reward_mean=Avg("value"), successes=Count("id", filter=Q(value__gte=0.5))
        )
        .order_by("minute")
    )
    return [
        {
            "minute": row["minute"],
            "rewards": row["rewards"],
            "reward_mean": row["reward_mean"],
            "success_rate": row["successes"] / row["rewards"],
        }
        for row in rows
    ]


def dangerously_steps_recorded_per_tenant() -> dict[str, int]:
    """Every tenant's recorded step count by tenant slug (the Prometheus endpoint only)."""
    return {
        slug: total or 0
        for slug, total in Trajectory.objects.values("tenant__slug")
        .annotate(total=Sum("step_count"))
        .values_list("tenant__slug", "total")
    }
