"""Every write of decisions: recorded with their evidence, approved (one operator or two people), rejected,
expired, started and finished. Each runs in a transaction, is audited and published on the `evolution`
stream. Approval and rejection lock the row, so a decision is approved or rejected once."""

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from apps.audit.services import Actor, audit_record
from apps.core.errors import Conflict, Forbidden, Gone
from apps.core.selectors import get_in_tenant
from apps.evolution.models import (
    ApprovalMode,
    Decision,
    DecisionKind,
    DecisionStatus,
    EvolutionPolicy,
    PolicyMode,
)
from apps.metrics.publish import metrics_publish
from apps.tenants.models import Tenant

STREAM = "evolution"
# Kinds that change what serves: under approval_mode they wait for people even in auto mode.
SERVING_KINDS = frozenset({DecisionKind.PROMOTE})


def decision_payload(decision: Decision) -> dict:
    """What the timeline shows of a decision (the API's shape, the live stream's payload)."""
    return {
        "type": "decision",
        "id": decision.pk,
        "policy": decision.policy_id,
        "kind": decision.kind,
        "status": decision.status,
        "reason": decision.reason,
        "evidence": decision.evidence,
        "parent": decision.parent_id,
        "version": decision.version.number if decision.version is not None else None,
        "harness": decision.harness.label if decision.harness is not None else None,
        "approvals_required": decision.approvals_required,
        "approvals": decision.approvals,
        "decided_by": decision.decided_by,
        "rejected_by": decision.rejected_by,
        "started": decision.started,
        "outcome": decision.outcome,
        "created_at": decision.created_at.isoformat(),
        "expires_at": decision.expires_at.isoformat() if decision.expires_at else None,
        "finished_at": decision.finished_at.isoformat() if decision.finished_at else None,
    }


def _publish(decision: Decision) -> None:
    metrics_publish(tenant_id=decision.tenant_id, stream=STREAM, payload=decision_payload(decision))


def approvals_required(*, policy: EvolutionPolicy, kind: str) -> int:
    """How many people must approve a decision of `kind` under `policy` before it starts: none in auto mode
    (except a promotion, which follows the approval mode); in propose mode at least one for every kind."""
    by_mode = {ApprovalMode.AUTOMATIC: 0, ApprovalMode.ONE_OPERATOR: 1, ApprovalMode.TWO_PERSON: 2}
    people = by_mode[ApprovalMode(policy.approval_mode)]
    if policy.mode == PolicyMode.PROPOSE:
        return max(people, 1)
    return people if kind in SERVING_KINDS else 0


@transaction.atomic
def decision_record(
    *,
    tenant: Tenant,
    policy: EvolutionPolicy,
    kind: str,
    reason: str,
    evidence: dict | None = None,
    actor: Actor,
    parent: Decision | None = None,
    version=None,
    harness=None,
    status: str | None = None,
) -> Decision:
    """A new decision of `policy`: proposed when people must approve it, approved otherwise (the caller starts
    it). `status` forces one (a `nothing` decision is recorded as succeeded). Audited and published."""
    required = approvals_required(policy=policy, kind=kind)
    if status is None:
        status = DecisionStatus.PROPOSED if required else DecisionStatus.APPROVED
    now = timezone.now()
    decision = Decision.objects.create(
        tenant=tenant,
        policy=policy,
        kind=kind,
        status=status,
        reason=reason[:500],
        evidence=evidence or {},
        parent=parent,
        version=version,
        harness=harness,
        approvals_required=required,
        decided_by=actor.label,
        policy_revision=policy.revision,
        expires_at=now + timedelta(seconds=policy.decision_ttl_seconds) if required else None,
        finished_at=now if status in {DecisionStatus.SUCCEEDED, DecisionStatus.FAILED} else None,
    )
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="evolution_decision.create",
        target=decision,
        data={"kind": kind, "status": status, "reason": decision.reason, "policy": policy.pk},
    )
    _publish(decision)
    return decision


def _lock(*, tenant: Tenant, decision_id) -> Decision:
    return get_in_tenant(
        Decision.objects.select_for_update(), tenant=tenant, code="decision_not_found", pk=decision_id
    )


def _refuse_if_closed(decision: Decision, now) -> None:
    if decision.status != DecisionStatus.PROPOSED:
        raise Conflict(f"the decision is {decision.status}, not waiting for approval", code="decision_closed")
    if decision.expires_at is not None and decision.expires_at <= now:
        raise Gone("the decision expired before it was approved", code="decision_expired")


def _person(actor: Actor) -> tuple[str, str]:
    return (actor.kind, actor.id)


@transaction.atomic
def decision_approve(*, tenant: Tenant, actor: Actor, decision_id) -> Decision:
    """Adds `actor`'s approval; with enough approvals the decision becomes approved (the control plane starts
    it on its next tick, or the caller at once). 409 once decided or when this person already approved it;
    410 after it expired; 403 for an approval that names no person under the two-person mode."""
    decision = _lock(tenant=tenant, decision_id=decision_id)
    now = timezone.now()
    _refuse_if_closed(decision, now)
    if actor.kind not in {"user", "api_key"}:
        raise Forbidden("a decision is approved by a person", code="approval_needs_person")
    if any((row["kind"], row["id"]) == _person(actor) for row in decision.approvals):
        raise Conflict("you already approved this decision; another person must", code="already_approved")
    decision.approvals = [
        *decision.approvals,
        {"actor": actor.label, "kind": actor.kind, "id": actor.id, "at": now.isoformat()},
    ]
    if len(decision.approvals) >= decision.approvals_required:
        decision.status = DecisionStatus.APPROVED
    decision.save(update_fields=["approvals", "status"])
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="evolution_decision.approve",
        target=decision,
        data={"approvals": len(decision.approvals), "required": decision.approvals_required},
    )
    _publish(decision)
    return decision


@transaction.atomic
def decision_reject(*, tenant: Tenant, actor: Actor, decision_id, reason: str = "") -> Decision:
    """proposed → rejected (nothing is started). 409 once decided, 410 after it expired."""
    decision = _lock(tenant=tenant, decision_id=decision_id)
    now = timezone.now()
    _refuse_if_closed(decision, now)
    decision.status = DecisionStatus.REJECTED
    decision.rejected_by = actor.label
    decision.outcome = (reason or f"rejected by {actor.label}")[:500]
    decision.finished_at = now
    decision.save(update_fields=["status", "rejected_by", "outcome", "finished_at"])
    audit_record(
        tenant=tenant, actor=actor, verb="evolution_decision.reject", target=decision, data={"reason": reason}
    )
    _publish(decision)
    return decision


def decisions_expire(*, tenant: Tenant, policy: EvolutionPolicy, now=None) -> int:
    """Proposals past their `expires_at` become expired (audited one by one). Returns how many."""
    now = now or timezone.now()
    expired = 0
    stale = Decision.objects.for_tenant(tenant).filter(
        policy=policy, status=DecisionStatus.PROPOSED, expires_at__lte=now
    )
    for decision_id in stale.values_list("pk", flat=True):
        with transaction.atomic():
            decision = _lock(tenant=tenant, decision_id=decision_id)
            if decision.status != DecisionStatus.PROPOSED:
                continue
            decision.status = DecisionStatus.EXPIRED
            decision.outcome = "no one approved it in time"
            decision.finished_at = now
            decision.save(update_fields=["status", "outcome", "finished_at"])
            audit_record(
                tenant=tenant,
                actor=Actor.system(f"evolution policy {policy.pk}"),
                verb="evolution_decision.expire",
                target=decision,
            )
            _publish(decision)
            expired += 1
    return expired


@transaction.atomic
def decision_start(
    *, tenant: Tenant, decision_id, started: dict | None = None, outcome: str = ""
) -> Decision:
    """approved → running, recording what it started (ids by kind, merged into `started`)."""
    decision = _lock(tenant=tenant, decision_id=decision_id)
    if decision.status != DecisionStatus.APPROVED:
        raise Conflict(f"the decision is {decision.status}, not approved", code="decision_not_approved")
    decision.status = DecisionStatus.RUNNING
    decision.started = _merge(decision.started, started or {})
    decision.outcome = outcome[:500]
    decision.save(update_fields=["status", "started", "outcome"])
    audit_record(
        tenant=tenant,
        actor=Actor.system(f"evolution policy {decision.policy_id}"),
        verb="evolution_decision.start",
        target=decision,
        data={"started": decision.started},
    )
    _publish(decision)
    return decision


@transaction.atomic
def decision_finish(
    *,
    tenant: Tenant,
    decision_id,
    succeeded: bool,
    outcome: str,
    started: dict | None = None,
    evidence: dict | None = None,
) -> Decision:
    """approved or running → succeeded | failed, with how it ended (and, merged, what it started and any
    evidence gathered on the way, such as a gate's results)."""
    decision = _lock(tenant=tenant, decision_id=decision_id)
    if decision.status not in {DecisionStatus.APPROVED, DecisionStatus.RUNNING}:
        raise Conflict(f"the decision is {decision.status}, not under way", code="decision_not_running")
    decision.status = DecisionStatus.SUCCEEDED if succeeded else DecisionStatus.FAILED
    decision.outcome = outcome[:500]
    decision.started = _merge(decision.started, started or {})
    decision.evidence = {**decision.evidence, **(evidence or {})}
    decision.finished_at = timezone.now()
    decision.save(update_fields=["status", "outcome", "started", "evidence", "finished_at"])
    audit_record(
        tenant=tenant,
        actor=Actor.system(f"evolution policy {decision.policy_id}"),
        verb="evolution_decision.finish",
        target=decision,
        data={"status": decision.status, "outcome": decision.outcome},
    )
    _publish(decision)
    return decision


@transaction.atomic
def decision_note(
    *, tenant: Tenant, decision_id, evidence: dict | None = None, harness=None, version=None
) -> Decision:
    """Adds to an open decision what its action learnt on the way (evidence merged; the harness and
    version it proposed). Not audited: the decision's start and end are, and carry these."""
    decision = _lock(tenant=tenant, decision_id=decision_id)
    if decision.status not in {DecisionStatus.APPROVED, DecisionStatus.RUNNING}:
        raise Conflict(f"the decision is {decision.status}, not under way", code="decision_not_running")
    fields = []
    if evidence:
        decision.evidence = {**decision.evidence, **evidence}
        fields.append("evidence")
    if harness is not None:
        decision.harness = harness
        fields.append("harness")
    if version is not None:
        decision.version = version
        fields.append("version")
    if fields:
        decision.save(update_fields=fields)
    return decision


def _merge(current: dict, more: dict) -> dict:
    merged = {key: list(values) for key, values in current.items()}
    for key, values in more.items():
        merged.setdefault(key, [])
        merged[key].extend(value for value in values if value not in merged[key])
    return merged
