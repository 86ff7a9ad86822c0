"""release, promote, rollback: the candidate through a release, or production back a version."""

from typing import TYPE_CHECKING

from apps.audit.services import Actor
from apps.core.errors import Conflict, DomainError, Forbidden
from apps.evolution.decisions import decision_start
from apps.evolution.selectors import production_versions
from apps.loop.actions.common import _fail, _production, _succeed, policy_actor
from apps.releases.release_words import release_title

if TYPE_CHECKING:
    from apps.evolution.models import Decision, EvolutionPolicy


def _release(*, tenant, decision, policy) -> "Decision":
    from apps.releases.provisioning import version_provision
    from apps.releases.services import release_create, release_start

    candidate = decision.version
    production = _production(tenant=tenant, policy=policy)
    if candidate is None or production is None:
        return _fail(tenant, decision, "a release needs a candidate and a production version")
    actor = policy_actor(policy)
    try:  # the weights on a free serving slot first, as a release's start would load them
        loaded = version_provision(
            tenant=tenant, actor=actor, version=candidate, baseline=production, purpose="its canary"
        )
    except Conflict as refusal:
        return _fail(tenant, decision, str(refusal))
    plan = dict(policy.release_plan or {})
    suites = [policy.gate["safety_suite_id"]] if (policy.gate or {}).get("safety_suite_id") else []
    release = release_create(
        tenant=tenant,
        actor=actor,
        candidate_id=candidate.pk,
        baseline_id=production.pk,
        stages=plan.get("stages"),
        guardrails=plan.get("guardrails"),
        eval_suite_ids=suites,
        failure_limit=int(plan.get("failure_limit", 0)),
        inconclusive_limit=int(plan.get("inconclusive_limit", 3)),
        stage_min_seconds=int(plan.get("stage_min_seconds", 0)),
    )
    release = release_start(tenant=tenant, actor=actor, release_id=release.pk)
    return decision_start(
        tenant=tenant,
        decision_id=decision.pk,
        started={"releases": [release.pk]},
        outcome=f"started the {release_title(release)}" + (f"; {loaded}" if loaded else ""),
    )


def _follow_release(*, tenant, decision, policy) -> "Decision":
    from apps.releases.choices import ReleaseStatus
    from apps.releases.selectors import release_get
    from apps.releases.services import release_abort

    (release_id, *_) = decision.started.get("releases") or [None]
    if release_id is None:
        return _fail(tenant, decision, "no release was started")
    release = release_get(tenant=tenant, release_id=release_id)
    if release.status == ReleaseStatus.PAUSED and policy.mode == "auto":
        release = release_abort(
            tenant=tenant,
            actor=policy_actor(policy),
            release_id=release.pk,
            reason="the canary stayed inconclusive; the control plane moves on",
        )
    ended = {ReleaseStatus.PROMOTED, ReleaseStatus.ROLLED_BACK, ReleaseStatus.ABORTED}
    if release.status not in ended:
        return decision
    label = release.status.replace("_", " ")
    outcome = f"the {release_title(release)} was {label}"
    if release.status_reason:
        outcome += f": {release.status_reason}"
    evidence = {"release": release.pk, "release_status": release.status}
    if release.status == ReleaseStatus.PROMOTED:
        return _succeed(tenant, decision, outcome, evidence=evidence)
    return _fail(tenant, decision, outcome, evidence=evidence)


def _approver(decision: "Decision", policy: "EvolutionPolicy") -> Actor:
    """The last person who approved the decision (automatic mode: the policy)."""
    if decision.approvals:
        row = decision.approvals[-1]
        return Actor(kind=row["kind"], id=row["id"], label=row["actor"])
    return policy_actor(policy)


def _release_under_way(*, tenant, decision, policy):
    from apps.releases.choices import ACTIVE_STATUSES
    from apps.releases.selectors import release_list

    named = decision.evidence.get("release")
    releases = release_list(tenant=tenant, model=policy.model).filter(status__in=ACTIVE_STATUSES)
    if named:
        releases = releases.filter(pk=named)
    return releases.order_by("-id").first()


def _approvers(decision: "Decision", policy: "EvolutionPolicy") -> list[Actor]:
    """Every person who approved the decision, in order (automatic mode: the policy)."""
    if decision.approvals:
        return [Actor(kind=row["kind"], id=row["id"], label=row["actor"]) for row in decision.approvals]
    return [policy_actor(policy)]


def _promote(*, tenant, decision, policy) -> "Decision":
    """`release_approve` by each person who approved the decision, in turn, until the release is promoted: one
    approval promotes it, except under the tenant's two-person rule, where a release the control plane started
    takes two different people (the decision then asked for two: `decisions.approvals_required`). A refusal
    (403 `two_person_rule`, 409 `already_approved` for someone who approved on the release's page) moves on to
    the next approver; the last refusal fails the decision."""
    from apps.releases.approval import release_approve
    from apps.releases.choices import ReleaseStatus

    release = _release_under_way(tenant=tenant, decision=decision, policy=policy)
    if release is None:
        return _fail(tenant, decision, "the release is no longer under way")
    refusal: DomainError | None = None
    for approver in _approvers(decision, policy):
        try:
            release = release_approve(tenant=tenant, actor=approver, release_id=release.pk)
        except (Conflict, Forbidden) as error:
            if error.code not in {"two_person_rule", "already_approved"}:
                raise
            refusal = error
            continue
        if release.status == ReleaseStatus.PROMOTED:
            return _succeed(
                tenant,
                decision,
                f"the {release_title(release)} was promoted by {release.approved_by}",
                started={"releases": [release.pk]},
            )
    if refusal is not None:
        raise refusal
    return _fail(
        tenant,
        decision,
        f"the {release_title(release)} still awaits a second person's approval (the tenant's two-person rule)",
        started={"releases": [release.pk]},
    )


def _rollback(*, tenant, decision, policy) -> "Decision":
    from apps.releases.services import release_rollback

    release = _release_under_way(tenant=tenant, decision=decision, policy=policy)
    if release is None:
        return _restore_previous(tenant=tenant, decision=decision, policy=policy)
    release = release_rollback(
        tenant=tenant, actor=_approver(decision, policy), release_id=release.pk, reason=decision.reason
    )
    return _succeed(
        tenant,
        decision,
        f"the {release_title(release)} was rolled back",
        started={"releases": [release.pk]},
    )


def _restore_previous(*, tenant, decision, policy) -> "Decision":
    """No release under way: production goes back to the version it had before (apps.releases'
    production_restore: statuses, alias and routing, audited), and the learner is not touched."""
    from apps.releases.routing_writes import production_restore
    from apps.training.choices import VersionStatus

    current = _production(tenant=tenant, policy=policy)
    earlier = [
        version
        for version in production_versions(tenant=tenant, model=policy.model)
        if current is not None and version.pk != current.pk and version.status == VersionStatus.RETIRED
    ]
    if not earlier:
        return _fail(tenant, decision, "production has no earlier version to go back to")
    previous = earlier[-1]
    production_restore(
        tenant=tenant,
        actor=_approver(decision, policy),
        current=current,
        previous=previous,
        reason=decision.reason,
    )
    return _succeed(
        tenant,
        decision,
        f"production rolled back from v{current.number} to v{previous.number}",
        started={"versions": [previous.pk]},
    )
