"""Writes: reviews, gate verdicts, overrides, limits. Every write that can change a verdict re-runs the
gates on a worker (enqueued on commit)."""

from typing import TYPE_CHECKING

from django.db import transaction
from django.utils import timezone

from apps.audit.services import Actor, audit_record
from apps.core.errors import ValidationFailed
from apps.core.tasking import task_enqueue_on_commit
from apps.qualification.models import (
    Qualification,
    QualificationLimits,
    QualificationReason,
    QualificationStatus,
    Review,
    ReviewStatus,
)
from apps.qualification.selectors import (
    qualification_limits,
    trajectory_facts,
    trajectory_for_qualification,
)
from apps.tenants.models import Tenant
from apps.trajectories.selectors import dangerously_trajectory_lock
from workers.qualification.gates import OVERRIDE_CODE, evaluate

if TYPE_CHECKING:
    from apps.trajectories.models import Trajectory


def qualification_enqueue(*, trajectory_id) -> None:
    """Runs the trajectory's gates on a worker once the current transaction commits (immediately when
    none is open). Safe to call many times: the task is idempotent."""
    task_enqueue_on_commit("qualification.evaluate", str(trajectory_id))


def _effective(row: Qualification) -> tuple[str, list[str]]:
    if row.override_status == QualificationStatus.QUALIFIED:
        return QualificationStatus.QUALIFIED, []
    if row.override_status == QualificationStatus.DISQUALIFIED:
        return QualificationStatus.DISQUALIFIED, row.gate_reasons or [OVERRIDE_CODE]
    return row.gate_status, list(row.gate_reasons)


def _save_effective(row: Qualification) -> None:
    row.status, row.reasons = _effective(row)
    row.save()
    QualificationReason.objects.filter(qualification=row).delete()
    QualificationReason.objects.bulk_create(
        [QualificationReason(tenant_id=row.tenant_id, qualification=row, code=code) for code in row.reasons]
    )


@transaction.atomic
def qualification_evaluate(*, trajectory_id) -> Qualification | None:
    """Runs every gate over the trajectory and upserts its verdict (one row per trajectory: idempotent).
    Tenancy: the trajectory's own tenant (the id is globally unique). Locking: the trajectory row.
    When this trajectory turns out to be the earliest of identical ones, the later copies are re-queued
    so they are marked duplicates. Returns None for a trajectory that no longer exists."""
    trajectory = dangerously_trajectory_lock(trajectory_id)
    if trajectory is None:
        return None
    facts, digest = trajectory_facts(trajectory=trajectory)
    verdict = evaluate(facts, qualification_limits(tenant=trajectory.tenant))
    row, _ = Qualification.objects.get_or_create(
        trajectory=trajectory, defaults={"tenant": trajectory.tenant}
    )
    row.gate_status, row.gate_reasons = verdict.status, list(verdict.reasons)
    row.content_hash, row.training_reward, row.evaluated_at = digest, facts.training_reward, timezone.now()
    _save_effective(row)
    if not facts.is_duplicate:
        later = (
            Qualification.objects.filter(tenant=trajectory.tenant, content_hash=digest)
            .exclude(pk=row.pk)
            .values_list("trajectory_id", flat=True)
        )
        for other in later:
            qualification_enqueue(trajectory_id=other)
    return row


@transaction.atomic
def review_set(
    *, tenant: Tenant, actor: Actor, trajectory_id, status: str, note: str = "", reviewer=None
) -> Review:
    """Appends a review (audited `trajectory.review`) and re-runs the gates on commit. Tenancy: another
    tenant's trajectory is a 404. needs_changes and rejected need a note saying why."""
    trajectory = trajectory_for_qualification(tenant=tenant, trajectory_id=trajectory_id)
    if status not in ReviewStatus.values:
        raise ValidationFailed(f"unknown review status {status!r}", fields={"status": ["unknown"]})
    if status in (ReviewStatus.REJECTED, ReviewStatus.NEEDS_CHANGES) and not note.strip():
        raise ValidationFailed("say why in a note", fields={"note": ["required for this status"]})
    review = Review.objects.create(
        tenant=tenant,
        trajectory=trajectory,
        status=status,
        note=note,
        reviewer=reviewer,
        reviewer_label=actor.label,
    )
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="trajectory.review",
        target=trajectory,
        data={"status": status, "note": note},
    )
    qualification_enqueue(trajectory_id=trajectory.pk)
    return review


def review_import(*, tenant: Tenant, trajectory: "Trajectory", review: dict, recorded_at) -> Review | None:
    """Appends the review an imported ATDP record carries (`governance.review`) beside `trajectory`, a row of
    `tenant` the caller's transaction has just created: its status, note, reviewer (as a label: the person
    belongs to the record's origin, not to this tenant) and time (`recorded_at`; the import's own time when
    the record gives none). An `unreviewed` record appends nothing. History, not a new judgement: no note is
    demanded, no audit event of its own (the import's `trajectory.import` names it) and nothing is enqueued
    here (the imported trajectory's own save enqueues its gates on commit, and they read this review).
    Importing needs the same permission as reviewing, so this grants nothing new."""
    if review.get("status", ReviewStatus.UNREVIEWED) == ReviewStatus.UNREVIEWED:
        return None
    return Review.objects.create(
        tenant=tenant,
        trajectory=trajectory,
        status=review["status"],
        reviewer=None,
        reviewer_label=review.get("reviewer") or "",
        note=review.get("note") or "",
        created_at=recorded_at or timezone.now(),
    )


@transaction.atomic
def qualification_override(
    *, tenant: Tenant, actor: Actor, trajectory_id, status: str, reason: str
) -> Qualification:
    """An operator's verdict over the gates' (audited `qualification.override`). `status` qualified or
    disqualified; an empty status removes the override. The gates keep running and their reasons are
    kept beside it."""
    trajectory = trajectory_for_qualification(tenant=tenant, trajectory_id=trajectory_id)
    if status not in ("", QualificationStatus.QUALIFIED, QualificationStatus.DISQUALIFIED):
        raise ValidationFailed(
            "status must be qualified, disqualified or empty", fields={"status": ["invalid"]}
        )
    if not reason.strip():
        raise ValidationFailed("an override needs a reason", fields={"reason": ["required"]})
    row, _ = Qualification.objects.select_for_update().get_or_create(
        trajectory=trajectory, defaults={"tenant": tenant}
    )
    row.override_status, row.override_reason = status, reason
    row.overridden_by, row.overridden_at = actor.label, timezone.now()
    _save_effective(row)
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="qualification.override",
        target=trajectory,
        data={
            "status": status,
            "reason": reason,
            "gate_status": row.gate_status,
            "gate_reasons": row.gate_reasons,
        },
    )
    return row


@transaction.atomic
def qualification_limits_set(
    *, tenant: Tenant, actor: Actor, min_steps: int, max_steps: int, max_tokens: int
):
    """Sets the tenant's length limits (audited). Verdicts already stored change at their next run."""
    if not 0 < min_steps <= max_steps:
        raise ValidationFailed("need 0 < min_steps <= max_steps", fields={"max_steps": ["below min_steps"]})
    row, _ = QualificationLimits.objects.update_or_create(
        tenant=tenant, defaults={"min_steps": min_steps, "max_steps": max_steps, "max_tokens": max_tokens}
    )
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="qualification.limits",
        target=row,
        data={"min_steps": min_steps, "max_steps": max_steps, "max_tokens": max_tokens},
    )
    return row
