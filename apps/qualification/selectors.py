"""Reads of reviews, verdicts and the training queue, tenant first; and the facts the gates judge."""

from typing import TYPE_CHECKING

from django.db.models import Count, Prefetch

from apps.qualification.models import (
    Qualification,
    QualificationLimits,
    QualificationReason,
    QualificationStatus,
    Review,
    ReviewStatus,
)
from apps.rewards.selectors import training_reward
from apps.tenants.models import Tenant
from apps.trajectories.selectors import step_list, trajectory_row_get
from workers.atdp.tokens import unpack_floats, unpack_ids, unpack_versions
from workers.qualification.gates import Limits, StepFacts, TrajectoryFacts, content_hash

if TYPE_CHECKING:
    from apps.trajectories.models import Trajectory


def trajectory_for_qualification(*, tenant: Tenant, trajectory_id) -> "Trajectory":
    return trajectory_row_get(tenant=tenant, trajectory_id=trajectory_id)


def review_current(*, tenant: Tenant, trajectory_id) -> Review | None:
    return Review.objects.for_tenant(tenant).filter(trajectory_id=trajectory_id).first()


def review_list(*, tenant: Tenant, trajectory_id=None, status=None):
    reviews = Review.objects.for_tenant(tenant)
    if trajectory_id:
        reviews = reviews.filter(trajectory_id=trajectory_id)
    if status:
        reviews = reviews.filter(status=status)
    return reviews.order_by("-created_at", "-id")


def qualification_get(*, tenant: Tenant, trajectory_id) -> Qualification | None:
    return Qualification.objects.for_tenant(tenant).filter(trajectory_id=trajectory_id).first()


def qualification_rows(*, tenant: Tenant):
    """The tenant's verdicts (one per evaluated trajectory), e.g. to prefetch beside its trajectories."""
    return Qualification.objects.for_tenant(tenant)


def qualification_limits(*, tenant: Tenant) -> Limits:
    row = QualificationLimits.objects.filter(tenant=tenant).first()
    if row is None:
        return Limits()
    return Limits(min_steps=row.min_steps, max_steps=row.max_steps, max_tokens=row.max_tokens)


def _step_facts(step: dict) -> StepFacts:
    has_tokens = step["completion_ids"] is not None and step["prompt_ids"] is not None
    consistent = True
    if has_tokens:
        count = len(unpack_ids(bytes(step["completion_ids"])))
        logprobs = (
            len(unpack_floats(bytes(step["completion_logprobs"]))) if step["completion_logprobs"] else 0
        )
        versions = (
            len(unpack_versions(bytes(step["completion_versions"]))) if step["completion_versions"] else 0
        )
        consistent = count > 0 and logprobs == count and versions == count
    return StepFacts(
        step_id=str(step["id"]),
        kind=step["kind"],
        retry_of=str(step["retry_of"]) if step["retry_of"] else None,
        aborted=step["aborted"],
        pii_redacted=bool(step["pii_entities"]),
        has_tokens=has_tokens,
        tokens_consistent=consistent,
        retokenized=step["retokenized"],
    )


STEP_FACT_FIELDS = (
    "id",
    "kind",
    "retry_of",
    "aborted",
    "pii_entities",
    "prompt_ids",
    "completion_ids",
    "completion_logprobs",
    "completion_versions",
    "retokenized",
    "observation",
    "action",
)


def trajectory_facts(*, trajectory) -> tuple[TrajectoryFacts, str]:
    """(facts for the gates, content hash). Duplicate: another trajectory of the tenant with the same
    content hash that started earlier (ties broken by id)."""
    tenant = trajectory.tenant
    steps = list(step_list(tenant=tenant, trajectory=trajectory).values(*STEP_FACT_FIELDS))
    digest = content_hash(steps)
    earlier = (
        Qualification.objects.for_tenant(tenant)
        .filter(content_hash=digest)
        .exclude(trajectory_id=trajectory.pk)
        .values_list("trajectory__started_at", "trajectory_id")
    )
    is_duplicate = any(
        (started, str(other)) < (trajectory.started_at, str(trajectory.pk)) for started, other in earlier
    )
    review = review_current(tenant=tenant, trajectory_id=trajectory.pk)
    facts = TrajectoryFacts(
        status=trajectory.status,
        purpose=trajectory.purpose,
        consent=trajectory.consent,
        training_use=trajectory.training_use,
        training_reward=training_reward(tenant=tenant, trajectory=trajectory),
        review_status=review.status if review else ReviewStatus.UNREVIEWED,
        review_required=bool(getattr(getattr(tenant, "policy", None), "review_required", False)),
        total_tokens=trajectory.prompt_tokens + trajectory.completion_tokens,
        steps=tuple(_step_facts(step) for step in steps),
        is_duplicate=is_duplicate,
    )
    return facts, digest


def training_queue(*, tenant: Tenant) -> list[dict]:
    """Qualified trajectories waiting, counted by agent, task and group (largest first)."""
    rows = (
        Qualification.objects.for_tenant(tenant)
        .filter(status=QualificationStatus.QUALIFIED)
        .values("trajectory__agent_name", "trajectory__task_id", "trajectory__group_id")
        .annotate(count=Count("id"))
        .order_by("-count", "trajectory__agent_name", "trajectory__task_id", "trajectory__group_id")
    )
    return [
        {
            "agent": row["trajectory__agent_name"],
            "task_id": row["trajectory__task_id"],
            "group_id": row["trajectory__group_id"],
            "count": row["count"],
        }
        for row in rows
    ]


def qualified_content_hashes(
    *, tenant: Tenant, agent: str | None = None, task_id: str | None = None, limit: int | None = None
) -> list[tuple[str, str]]:
    """(trajectory id, content hash) of the tenant's qualified trajectories (of `agent`, of `task_id` when
    given), oldest first, the first `limit` of them when given: the training queue a job's snapshot freezes."""
    rows = Qualification.objects.for_tenant(tenant).filter(status=QualificationStatus.QUALIFIED)
    if agent:
        rows = rows.filter(trajectory__agent_name=agent)
    if task_id:
        rows = rows.filter(trajectory__task_id=task_id)
    rows = rows.order_by("trajectory__started_at", "trajectory_id").values_list(
        "trajectory_id", "content_hash"
    )
    return [(str(trajectory_id), digest) for trajectory_id, digest in (rows[:limit] if limit else rows)]


def content_hashes(*, tenant: Tenant, trajectory_ids) -> dict:
    """{trajectory id: content hash} of those of `trajectory_ids` the tenant's gates have judged."""
    return dict(
        Qualification.objects.for_tenant(tenant)
        .filter(trajectory_id__in=trajectory_ids)
        .values_list("trajectory_id", "content_hash")
    )


def qualified_trajectory_ids(*, tenant_id: int, started_since, excluding, limit: int) -> list:
    """Ids of tenant `tenant_id`'s qualified trajectories started at or after `started_since`, oldest first, at most
    `limit`, leaving out the trajectory ids `excluding` holds (ids, or a queryset of `trajectory_id` values,
    read as a subquery): what an online run has not consumed yet."""
    return list(
        Qualification.objects.filter(
            tenant_id=tenant_id,
            status=QualificationStatus.QUALIFIED,
            trajectory__started_at__gte=started_since,
        )
        .exclude(trajectory_id__in=excluding)
        .order_by("trajectory__started_at", "trajectory_id")
        .values_list("trajectory_id", flat=True)[:limit]
    )


def disqualified_counts(*, tenant: Tenant) -> list[dict]:
    """Disqualified trajectories by reason code (one trajectory counts under each of its codes)."""
    rows = (
        QualificationReason.objects.for_tenant(tenant)
        .filter(qualification__status=QualificationStatus.DISQUALIFIED)
        .values("code")
        .annotate(count=Count("qualification_id", distinct=True))
        .order_by("-count", "code")
    )
    return [{"code": row["code"], "count": row["count"]} for row in rows]


def qualification_list(*, tenant: Tenant, status=None, reason=None, agent=None, task_id=None, group_id=None):
    """Verdicts with their trajectories, newest trajectory first; `reason` filters by effective code."""
    rows = Qualification.objects.for_tenant(tenant).select_related("trajectory")
    if status:
        rows = rows.filter(status=status)
    if reason:
        rows = rows.filter(reason_rows__code=reason)
    exact = {
        "trajectory__agent_name": agent,
        "trajectory__task_id": task_id,
        "trajectory__group_id": group_id,
    }
    rows = rows.filter(**{name: value for name, value in exact.items() if value is not None})
    return rows.order_by("-trajectory__started_at", "-trajectory_id")


def review_record_part(tenant: Tenant) -> Prefetch:
    """The reviews of an ATDP record (trajectories.selectors.trajectory_with_records), newest first."""
    return Prefetch("reviews", queryset=review_list(tenant=tenant), to_attr="reviews_newest_first")


def qualification_record_part(tenant: Tenant) -> Prefetch:
    """The gates' verdict of an ATDP record, `tenant_qualification` (None before the gates ran)."""
    return Prefetch(
        "qualification", queryset=qualification_rows(tenant=tenant), to_attr="tenant_qualification"
    )
