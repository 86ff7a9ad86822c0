"""Reads of reviews, verdicts and the training queue, tenant first; and the facts the gates judge."""

from django.db.models import Count, Prefetch

from apps.core.selectors import get_in_tenant
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
from apps.trajectories.models import Step, Trajectory
from workers.atdp.tokens import unpack_floats, unpack_ids, unpack_versions
from workers.qualification.gates import Limits, StepFacts, TrajectoryFacts, content_hash


def trajectory_for_qualification(*, tenant: Tenant, trajectory_id) -> Trajectory:
    return get_in_tenant(
        Trajectory.objects.select_related("tenant"),
        tenant=tenant,
        pk=trajectory_id,
        code="trajectory_not_found",
    )


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
    steps = list(
        Step.objects.for_tenant(tenant)
        .filter(trajectory=trajectory)
        .order_by("index")
        .values(*STEP_FACT_FIELDS)
    )
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
