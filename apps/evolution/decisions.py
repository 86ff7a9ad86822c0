"""Every write of decisions: recorded with their evidence, approved (one operator or two people), rejected,
expired, started and finished. Each runs in a transaction, is audited and published on the `evolution`
stream. Approval and rejection lock the row, so a decision is approved or rejected once."""

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from apps.audit.services import Actor, audit_record
from apps.core.errors import Conflict, Forbidden, Gone
from apps.core.selectors import get_in_tenant
from apps.evolution.gate_words import evidence_gate_words
from apps.evolution.models import (
    ApprovalMode,
    Decision,
    DecisionKind,
    DecisionStatus,
    EvolutionPolicy,
    PolicyMode,
)
from apps.metrics.publish import metrics_publish
from apps.releases.release_words import release_title
from apps.tenants.models import Tenant

STREAM = "evolution"
# Kinds that change what serves: under approval_mode they wait for people even in auto mode.
SERVING_KINDS = frozenset({DecisionKind.PROMOTE})


def approval_question(decision: Decision) -> str:
    """What the console asks before an approval is sent: what the decision changes, with the version and the
    share of traffic it gets."""
    policy = decision.policy
    version = f"v{decision.version.number}" if decision.version is not None else "the candidate"
    candidate = (decision.evidence or {}).get("candidate")
    if decision.kind == DecisionKind.PROMOTE:
        return f"Approve promoting {version} of {policy.model} to production? It then takes 100% of new sessions."
    if decision.kind == DecisionKind.RELEASE:
        stages = list((policy.release_plan or {}).get("stages") or [5, 25, 50, 100])
        return (
            f"Approve releasing {version} of {policy.model}? A canary takes {stages[0]:g}% of new sessions "
            f"first (stages {' → '.join(f'{stage:g}' for stage in stages)} %), then waits for approval."
        )
    if decision.kind == DecisionKind.ROLLBACK:
        what = f"the release of v{candidate} of {policy.model}" if candidate is not None else policy.model
        return f"Approve rolling back {what}? The version before takes 100% of new sessions again."
    return f"Approve this {decision.get_kind_display().lower()} decision for {policy.model}?"


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
        "gate_words": evidence_gate_words(
            decision.evidence, version=decision.version.number if decision.version is not None else None
        ),
        "created_at": decision.created_at.isoformat(),
        "expires_at": decision.expires_at.isoformat() if decision.expires_at else None,
        "finished_at": decision.finished_at.isoformat() if decision.finished_at else None,
        "approval_question": approval_question(decision)
        if decision.status == DecisionStatus.PROPOSED
        else "",
    }


def _publish(decision: Decision) -> None:
    metrics_publish(tenant_id=decision.tenant_id, stream=STREAM, payload=decision_payload(decision))


def approvals_required(*, policy: EvolutionPolicy, kind: str, harness=None) -> int:
    """How many people must approve a decision of `kind` under `policy` before it starts: none in auto mode
    (except a promotion, which follows the approval mode); in propose mode at least one for every kind. Under
    the tenant's two-person rule a promotion takes two people whatever the approval mode: the release it
    promotes was started by the control plane, which is no person (apps.releases' `release_approve`)."""
    from apps.tenants.selectors import two_person_rule_on

    by_mode = {ApprovalMode.AUTOMATIC: 0, ApprovalMode.ONE_OPERATOR: 1, ApprovalMode.TWO_PERSON: 2}
    people = by_mode[ApprovalMode(policy.approval_mode)]
    if kind in SERVING_KINDS and two_person_rule_on(tenant=policy.tenant):
        people = max(people, 2)
    if policy.mode == PolicyMode.PROPOSE or getattr(harness, "quotes_traffic", False):
        # a harness quoting recorded conversations waits for a person in every mode (apps/evolution README)
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
    required = approvals_required(policy=policy, kind=kind, harness=harness)
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
        why = f": {decision.outcome}" if decision.outcome else ""
        raise Conflict(
            f"the decision is {decision.status}, not waiting for approval{why}", code="decision_closed"
        )
    if decision.expires_at is not None and decision.expires_at <= now:
        raise Gone("the decision expired before it was approved", code="decision_expired")


def _person_of(*, tenant: Tenant, kind: str, principal_id: str) -> int | None:
    """The person behind a principal (apps.tenants' `person_behind`: a user is themself, an API key the
    member who created it); None when it names no person (the system, a key from the CLI)."""
    from apps.tenants.selectors import person_behind

    return person_behind(tenant=tenant, actor_kind=kind, actor_id=principal_id or "")


def _approver_of(*, tenant: Tenant, row: dict) -> int | None:
    if row.get("person") is not None:
        return row["person"]
    return _person_of(tenant=tenant, kind=row.get("kind", ""), principal_id=str(row.get("id") or ""))


def decision_approve(*, tenant: Tenant, actor: Actor, decision_id) -> Decision:
    """Adds `actor`'s approval; with enough approvals the decision becomes approved (the control plane starts
    it on its next tick, or the caller at once). Approvals count people, not principals: an API key is the
    member who created it (`person_behind`), so one person's session and keys approve once. 409 once decided
    (with how it ended) or when this person already approved it; 410 after it expired; 403
    `approval_needs_person` for an approval that names no person (the system, a key no member created) where
    people are counted (two approvals or more). A promotion or rollback whose release already ended is closed
    the way its release went (`decision_follow_release`) and the approval refused with 409 `release_finished`."""
    ended = _close_if_release_ended(tenant=tenant, decision_id=decision_id)
    if ended:
        raise Conflict(f"nothing to approve: {ended}", code="release_finished")
    return _approve(tenant=tenant, actor=actor, decision_id=decision_id)


@transaction.atomic
def _approve(*, tenant: Tenant, actor: Actor, decision_id) -> Decision:
    decision = _lock(tenant=tenant, decision_id=decision_id)
    now = timezone.now()
    _refuse_if_closed(decision, now)
    if actor.kind not in {"user", "api_key"}:
        raise Forbidden("a decision is approved by a person", code="approval_needs_person")
    person = _person_of(tenant=tenant, kind=actor.kind, principal_id=actor.id)
    if person is None and decision.approvals_required >= 2:
        raise Forbidden(
            "this decision needs two different people, and this approval names no person (the API key was not "
            "created by a member): approve as a person or with a key a member created",
            code="approval_needs_person",
        )
    for row in decision.approvals:
        same_principal = (row.get("kind"), row.get("id")) == (actor.kind, actor.id)
        if same_principal or (person is not None and _approver_of(tenant=tenant, row=row) == person):
            raise Conflict(
                "you already approved this decision (a key you created counts as you); another person must",
                code="already_approved",
            )
    decision.approvals = [
        *decision.approvals,
        {"actor": actor.label, "kind": actor.kind, "id": actor.id, "person": person, "at": now.isoformat()},
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


# ---- a decision follows its release -------------------------------------------------------------------------

# Kinds about one release: their state follows it once it ended (promoted elsewhere, rolled back, aborted).
RELEASE_KINDS = frozenset({DecisionKind.PROMOTE, DecisionKind.ROLLBACK})
_OPEN = (DecisionStatus.PROPOSED, DecisionStatus.APPROVED)


def _release_of(decision: Decision) -> int | None:
    release_id = (decision.evidence or {}).get("release") if decision.kind in RELEASE_KINDS else None
    return int(release_id) if isinstance(release_id, int | str) and str(release_id).isdigit() else None


def _how_it_ended(*, tenant: Tenant, release) -> tuple[str, str]:
    """(who ended the release, the sentence saying how): its last event's actor and reason."""
    from apps.releases.selectors import release_events

    last = release_events(tenant=tenant, release_id=release.pk).order_by("-at", "-id").first()
    who = release.approved_by if release.approved_by else (last.actor if last is not None else "")
    sentence = f"the {release_title(release)} was {release.status.replace('_', ' ')}"
    if who:
        sentence += f" by {who}"
    reason = release.status_reason or (last.reason if last is not None else "")
    if reason:
        sentence += f": {reason}"
    return who, sentence


def _close_with_release(*, tenant: Tenant, decision: Decision, release) -> Decision:
    """Closes an open promotion or rollback the way its (ended) release went: a promotion of a release that was
    promoted succeeded (someone did what it proposed); of one rolled back or aborted, it was rejected by
    whoever ended the release. A rollback of a release rolled back or aborted succeeded; of one promoted, it
    was rejected by its approver. Audited `evolution_decision.follow_release` and published."""
    from apps.releases.choices import ReleaseStatus

    who, sentence = _how_it_ended(tenant=tenant, release=release)
    promoted = release.status == ReleaseStatus.PROMOTED
    happened = promoted if decision.kind == DecisionKind.PROMOTE else not promoted
    now = timezone.now()
    decision.status = DecisionStatus.SUCCEEDED if happened else DecisionStatus.REJECTED
    decision.rejected_by = "" if happened else (who or "the release")[:150]
    decision.outcome = sentence[:500]
    decision.finished_at = now
    decision.evidence = {**decision.evidence, "release_status": release.status}
    decision.save(update_fields=["status", "rejected_by", "outcome", "finished_at", "evidence"])
    audit_record(
        tenant=tenant,
        actor=Actor.system(f"evolution policy {decision.policy_id}"),
        verb="evolution_decision.follow_release",
        target=decision,
        data={"release": release.pk, "release_status": release.status, "status": decision.status},
    )
    _publish(decision)
    return decision


@transaction.atomic
def _close_if_release_ended(*, tenant: Tenant, decision_id) -> str:
    """The sentence saying how the release of an open promotion or rollback ended, once the decision is closed
    accordingly; "" when the decision names no release, is not open, or its release is still under way."""
    from apps.releases.choices import ACTIVE_STATUSES
    from apps.releases.selectors import release_get

    decision = _lock(tenant=tenant, decision_id=decision_id)
    release_id = _release_of(decision)
    if release_id is None or decision.status not in _OPEN:
        return ""
    release = release_get(tenant=tenant, release_id=release_id)
    if release.status in ACTIVE_STATUSES:
        return ""
    return _close_with_release(tenant=tenant, decision=decision, release=release).outcome


def decision_follow_release(*, tenant: Tenant, release_id: int) -> int:
    """Closes every open promotion and rollback about `release_id` once that release ended (apps.releases sends
    `release_finished` on commit; the tick does it too, for what a lost signal left open). Idempotent: a
    closed decision is left alone. Each decision in a transaction of its own, its row locked. Returns how many
    it closed."""
    candidates = Decision.objects.for_tenant(tenant).filter(
        kind__in=RELEASE_KINDS, status__in=_OPEN, evidence__release=release_id
    )
    closed = 0
    for decision_id in candidates.values_list("pk", flat=True):
        if _close_if_release_ended(tenant=tenant, decision_id=decision_id):
            closed += 1
    return closed


def decision_follow_release_receiver(sender, *, tenant_id: int, release_id: int, **kwargs) -> None:
    """`apps.releases.events.release_finished`'s receiver (connected in apps.py): only calls the service."""
    from apps.tenants.selectors import tenant_get

    decision_follow_release(tenant=tenant_get(tenant_id=tenant_id), release_id=release_id)


def decision_reject(*, tenant: Tenant, actor: Actor, decision_id, reason: str = "") -> Decision:
    """proposed → rejected (nothing is started). 409 once decided (with how it ended), 410 after it expired;
    a promotion or rollback whose release already ended is closed the way its release went and the rejection
    refused with 409 `release_finished`."""
    ended = _close_if_release_ended(tenant=tenant, decision_id=decision_id)
    if ended:
        raise Conflict(f"nothing to reject: {ended}", code="release_finished")
    return _reject(tenant=tenant, actor=actor, decision_id=decision_id, reason=reason)


@transaction.atomic
def _reject(*, tenant: Tenant, actor: Actor, decision_id, reason: str = "") -> Decision:
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
