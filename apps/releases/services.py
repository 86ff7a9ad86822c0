"""Every write of releases and routing state. Each runs in a transaction, moves a release only along
RELEASE_TRANSITIONS with a conditional update (zero rows: someone else moved it first → 409), and records the
move in ReleaseEvent and the audit chain. Routing changes append to the serving history."""

from typing import TYPE_CHECKING

from django.db import transaction
from django.utils import timezone

from apps.audit.services import Actor, audit_record
from apps.core.errors import Conflict, Forbidden, NotFound, ValidationFailed
from apps.core.selectors import get_in_tenant
from apps.core.tasking import task_enqueue_on_commit
from apps.metrics.publish import metrics_publish
from apps.releases.models import (
    ACTIVE_STATUSES,
    RELEASE_TRANSITIONS,
    AnalysisRun,
    Release,
    ReleaseEvent,
    ReleaseStatus,
    RoutingState,
    ServingEvent,
    SessionRoute,
)
from apps.tenants.models import Tenant
from apps.training.choices import VersionStatus
from workers.evaluation.analysis import guardrail_problems

if TYPE_CHECKING:
    from apps.training.models import ModelVersion

SYSTEM = Actor.system("release-analysis")
DEFAULT_STAGES = [5, 25, 50, 100]


def release_stream(release_id: int) -> str:
    return f"release-{release_id}"


def release_plan_validate(*, stages, guardrails, failure_limit: int, inconclusive_limit: int) -> None:
    """Refuses a plan (stages, guardrails, limits) with field errors; `release_create` and the evolution
    policies (`apps.evolution.policies`, whose release plans become releases) use it."""
    fields = {}
    if (
        not isinstance(stages, list)
        or not stages
        or not all(isinstance(p, int | float) and not isinstance(p, bool) and 0 < p <= 100 for p in stages)
        or any(second <= first for first, second in zip(stages, stages[1:], strict=False))
    ):
        fields["stages"] = ["a rising list of percentages in (0, 100], e.g. [5, 25, 50, 100]"]
    if not isinstance(guardrails, list):
        fields["guardrails"] = ["a list of {metric, direction, threshold, min_samples, judge}"]
    else:
        for index, guardrail in enumerate(guardrails):
            problems = (
                guardrail_problems(guardrail) if isinstance(guardrail, dict) else {"guardrail": "an object"}
            )
            if problems:
                fields[f"guardrails[{index}]"] = [f"{name}: {text}" for name, text in problems.items()]
    if failure_limit < 0 or inconclusive_limit < 0:
        fields["limits"] = ["limits are ≥ 0"]
    if fields:
        raise ValidationFailed("the release plan is invalid", fields=fields)


def _releasable(*, candidate, baseline) -> None:
    """Refusals with the reason: a version still training, another model, or another tokenizer."""
    if candidate.status == VersionStatus.TRAINING:
        raise Conflict(
            f"{candidate} is still training; release it once training has finished", code="version_training"
        )
    if candidate.status != VersionStatus.CANDIDATE:
        raise Conflict(
            f"{candidate} is {candidate.status}; only a candidate version can be released",
            code="version_not_releasable",
        )
    if candidate.pk == baseline.pk:
        raise ValidationFailed("the candidate and the baseline are the same version", code="same_version")
    if candidate.name != baseline.name:
        raise ValidationFailed(
            f"the candidate is a version of {candidate.name!r}, the baseline of {baseline.name!r}",
            code="model_mismatch",
        )
    if candidate.tokenizer_hash != baseline.tokenizer_hash:
        raise ValidationFailed(
            f"{candidate}'s tokenizer differs from the baseline's ({baseline}); the serving stack and recorded "
            "token data would not match",
            code="tokenizer_mismatch",
            fields={"candidate": ["tokenizer differs"]},
        )


@transaction.atomic
def release_create(
    *,
    tenant: Tenant,
    actor: Actor,
    candidate_id: int,
    baseline_id: int | None = None,
    stages: list | None = None,
    guardrails: list | None = None,
    eval_suite_ids: list | None = None,
    failure_limit: int = 0,
    inconclusive_limit: int = 3,
    stage_min_seconds: int = 0,
) -> Release:
    """A draft release of `candidate` over `baseline` (default: the model's `production` alias, else the
    routing's stable version). Refused (with the reason) for a version still training, of another model, with
    another tokenizer, or while another release of the model is active (409)."""
    from apps.evaluation.selectors import eval_suite_list
    from apps.training.selectors import alias_resolve, model_version_get

    candidate = model_version_get(tenant=tenant, version_id=candidate_id)
    baseline: ModelVersion | None
    if baseline_id is not None:
        baseline = model_version_get(tenant=tenant, version_id=baseline_id)
    else:
        baseline = alias_resolve(tenant=tenant, name=candidate.name, alias="production")
        if baseline is None:
            state = (
                RoutingState.objects.filter(tenant=tenant, model=candidate.name)
                .select_related("stable")
                .first()
            )
            baseline = state.stable if state else None
        if baseline is None:
            raise ValidationFailed(
                f"{candidate.name} has no production version; name a baseline", code="baseline_missing"
            )
    _releasable(candidate=candidate, baseline=baseline)
    stages = list(DEFAULT_STAGES if stages is None else stages)
    guardrails = list(guardrails or [])
    release_plan_validate(
        stages=stages,
        guardrails=guardrails,
        failure_limit=failure_limit,
        inconclusive_limit=inconclusive_limit,
    )
    suites = list(eval_suite_list(tenant=tenant).filter(pk__in=eval_suite_ids or []))
    if len(suites) != len(set(eval_suite_ids or [])):
        raise NotFound("no such eval suite in this tenant", code="eval_suite_not_found")
    if Release.objects.for_tenant(tenant).filter(model=candidate.name, status__in=ACTIVE_STATUSES).exists():
        raise Conflict(
            f"another release of {candidate.name} is active; finish or abort it first", code="release_active"
        )
    release = Release.objects.create(
        tenant=tenant,
        model=candidate.name,
        candidate=candidate,
        baseline=baseline,
        stages=stages,
        guardrails=[{"min_samples": 30, **guardrail} for guardrail in guardrails],
        failure_limit=failure_limit,
        inconclusive_limit=inconclusive_limit,
        stage_min_seconds=stage_min_seconds,
        created_by=actor.label,
    )
    release.eval_suites.set(suites)
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="release.create",
        target=release,
        data={
            "model": release.model,
            "candidate": candidate.number,
            "baseline": baseline.number,
            "stages": stages,
            "guardrails": release.guardrails,
            "eval_suites": [suite.name for suite in suites],
        },
    )
    return release


def _lock(*, tenant: Tenant, release_id) -> Release:
    return get_in_tenant(
        Release.objects.select_related("candidate", "baseline"),
        tenant=tenant,
        pk=release_id,
        code="release_not_found",
    )


def _transition(
    *, release: Release, to: str, actor: Actor, reason: str = "", stage_index: int | None = None, **fields
) -> Release:
    """The one way a release changes status: checked against RELEASE_TRANSITIONS, claimed by a conditional
    update on the status and stage it was read in, recorded in ReleaseEvent and the audit chain."""
    if to not in RELEASE_TRANSITIONS[release.status]:
        raise Conflict(f"a release that is {release.status} cannot become {to}", code="invalid_transition")
    now = timezone.now()
    updates = {"status": to, "status_reason": reason[:500], **fields}
    if stage_index is not None:
        updates["stage_index"] = stage_index
    finished = to in {ReleaseStatus.PROMOTED, ReleaseStatus.ROLLED_BACK, ReleaseStatus.ABORTED}
    if finished:
        updates["finished_at"] = now
    claimed = Release.objects.filter(
        pk=release.pk, status=release.status, stage_index=release.stage_index
    ).update(**updates)
    if not claimed:
        raise Conflict("the release was changed by someone else meanwhile; reload it", code="release_changed")
    previous = release.status
    release.refresh_from_db()
    ReleaseEvent.objects.create(
        tenant_id=release.tenant_id,
        release=release,
        from_status=previous,
        to_status=to,
        stage_index=release.stage_index,
        actor=actor.label,
        reason=reason[:500],
        at=now,
    )
    audit_record(
        tenant=release.tenant,
        actor=actor,
        verb=f"release.{to}",
        target=release,
        data={
            "from": previous,
            "to": to,
            "stage": release.stage_index,
            "percent": release.stage_percent,
            "reason": reason,
        },
    )
    metrics_publish(
        tenant_id=release.tenant_id,
        stream=release_stream(release.pk),
        payload={
            "kind": "status",
            "status": to,
            "stage_index": release.stage_index,
            "percent": release.stage_percent,
            "reason": reason,
            "at": now.isoformat(),
        },
    )
    if finished:
        from apps.releases.events import release_finished_send

        tenant_id, release_id = release.tenant_id, release.pk
        transaction.on_commit(lambda: release_finished_send(tenant_id=tenant_id, release_id=release_id))
    return release


def _routing_set(
    *,
    tenant: Tenant,
    model: str,
    stable,
    canary=None,
    percent: float = 0.0,
    release=None,
    actor: Actor,
    reason: str,
) -> RoutingState:
    """Points the tenant's model at `stable` (+ `canary` at `percent` of new sessions) and appends the change
    to the serving history. Locking: the routing row."""
    from apps.releases.version_routing import routing_cache_clear

    now = timezone.now()
    state = RoutingState.objects.select_for_update().filter(tenant=tenant, model=model).first()
    values = {
        "stable": stable,
        "canary": canary,
        "canary_percent": percent if canary else 0.0,
        "release": release,
        "updated_at": now,
    }
    if state is None:
        state = RoutingState.objects.create(tenant=tenant, model=model, **values)
    else:
        for field, value in values.items():
            setattr(state, field, value)
        state.save()
    ServingEvent.objects.create(
        tenant=tenant,
        model=model,
        stable=stable,
        canary=canary,
        canary_percent=state.canary_percent,
        release=release,
        reason=reason[:300],
        actor=actor.label,
        at=now,
    )
    transaction.on_commit(routing_cache_clear)
    return state


@transaction.atomic
def routing_initialize(*, tenant: Tenant, actor: Actor, version, reason: str = "serving set") -> RoutingState:
    """Declares what serves `version.name` for the tenant when no release has yet (audited)."""
    state = _routing_set(tenant=tenant, model=version.name, stable=version, actor=actor, reason=reason)
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="routing.set",
        target=version,
        data={"model": version.name, "stable": version.number},
    )
    return state


def session_pin(*, tenant: Tenant, version, session_id: str) -> SessionRoute:
    """Pins a session (an eval run's) to `version` whatever the routing says. Idempotent on the session; not a
    governance act, so not audited (the eval run that asks for it is)."""
    route, _ = SessionRoute.objects.update_or_create(
        tenant=tenant,
        model=version.name,
        session_id=session_id,
        defaults={"version": version, "pinned": True},
    )
    return route


def _set_version_status(*, tenant: Tenant, actor, version, status, reason) -> None:
    from apps.training.services import model_version_set_status

    model_version_set_status(tenant=tenant, actor=actor, version_id=version.pk, status=status, reason=reason)


@transaction.atomic
def production_restore(*, tenant: Tenant, actor: Actor, current, previous, reason: str) -> RoutingState:
    """Rolls production back outside a release: `current` (production) → rolled_back, `previous` (a version
    production had before, now retired) → production, the alias moved and every new session routed to it.
    409 when a release of the model is under way (roll that back instead) or `previous` is not retired."""
    from apps.training.services import alias_move

    if current.name != previous.name or current.pk == previous.pk:
        raise ValidationFailed("restore an earlier version of the same model")
    if Release.objects.for_tenant(tenant).filter(model=current.name, status__in=ACTIVE_STATUSES).exists():
        raise Conflict("a release of this model is under way: roll it back instead", code="release_under_way")
    if current.status != VersionStatus.PRODUCTION or previous.status != VersionStatus.RETIRED:
        raise Conflict(
            f"{current} is {current.status} and {previous} {previous.status}: only production can be rolled "
            "back to a retired version",
            code="not_restorable",
        )
    _set_version_status(
        tenant=tenant, actor=actor, version=current, status=VersionStatus.ROLLED_BACK, reason=reason
    )
    _set_version_status(
        tenant=tenant, actor=actor, version=previous, status=VersionStatus.PRODUCTION, reason=reason
    )
    alias_move(
        tenant=tenant, actor=actor, name=current.name, alias="production", version=previous, reason=reason
    )
    return _routing_set(tenant=tenant, model=current.name, stable=previous, actor=actor, reason=reason)


def release_start(*, tenant: Tenant, actor: Actor, release_id) -> Release:
    """draft → evaluating, once the candidate is on a serving slot: a draft's candidate is loaded onto a free
    backend of the model first when none holds its weights (`provisioning.candidate_provision`, outside any
    transaction: a call to a server), or the start is refused with the reason (409 `version_has_no_weights`,
    `no_free_slot`, `provision_failed`) and the release stays a draft. Then, in one transaction
    (`_release_begin`): one eval run per suite for the candidate and the baseline (enqueued on commit); the next
    analysis tick moves on to the first canary stage once they are done. Records who started it (the two-person
    rule compares the approver with this person)."""
    from apps.releases.provisioning import candidate_provision

    release = _lock(tenant=tenant, release_id=release_id)
    loaded = ""
    if release.status == ReleaseStatus.DRAFT:
        _releasable(candidate=release.candidate, baseline=release.baseline)
        loaded = candidate_provision(tenant=tenant, actor=actor, release=release)
    return _release_begin(tenant=tenant, actor=actor, release_id=release.pk, loaded=loaded)


@transaction.atomic
def _release_begin(*, tenant: Tenant, actor: Actor, release_id, loaded: str) -> Release:
    from apps.evaluation.services import eval_run_start

    release = _lock(tenant=tenant, release_id=release_id)
    _releasable(candidate=release.candidate, baseline=release.baseline)
    runs: dict[str, dict] = {"candidate": {}, "baseline": {}}
    for suite in release.eval_suites.all():
        for arm, version in (("candidate", release.candidate), ("baseline", release.baseline)):
            runs[arm][str(suite.pk)] = eval_run_start(
                tenant=tenant, actor=actor, suite_id=suite.pk, version_id=version.pk
            ).pk
    release = _transition(
        release=release,
        to=ReleaseStatus.EVALUATING,
        actor=actor,
        reason=f"started; {loaded}" if loaded else "started",
        started_by_kind=actor.kind,
        started_by_id=actor.id,
        started_by=actor.label,
        eval_runs=runs,
    )
    task_enqueue_on_commit("releases.analyze", release.pk)
    return release


def _enter_canary(*, release: Release, actor: Actor) -> Release:
    now = timezone.now()
    release = _transition(
        release=release,
        to=ReleaseStatus.CANARY,
        actor=actor,
        stage_index=0,
        reason=f"offline evaluation passed; stage 1 at {release.stages[0]}%",
        canary_started_at=now,
        stage_started_at=now,
    )
    _set_version_status(
        tenant=release.tenant,
        actor=actor,
        version=release.candidate,
        status=VersionStatus.CANARY,
        reason=f"canary of release {release.pk}",
    )
    _routing_set(
        tenant=release.tenant,
        model=release.model,
        stable=release.baseline,
        canary=release.candidate,
        percent=release.stage_percent,
        release=release,
        actor=actor,
        reason=f"release {release.pk}: canary {release.stage_percent:g}%",
    )
    return release


def _advance(*, release: Release, actor: Actor) -> Release:
    if release.stage_index + 1 < len(release.stages):
        release = _transition(
            release=release,
            to=ReleaseStatus.CANARY,
            actor=actor,
            stage_index=release.stage_index + 1,
            stage_started_at=timezone.now(),
            reason=f"stage {release.stage_index + 2} at {release.stages[release.stage_index + 1]}%",
            consecutive_failures=0,
            consecutive_inconclusive=0,
        )
        _routing_set(
            tenant=release.tenant,
            model=release.model,
            stable=release.baseline,
            canary=release.candidate,
            percent=release.stage_percent,
            release=release,
            actor=actor,
            reason=f"release {release.pk}: canary {release.stage_percent:g}%",
        )
        return release
    return _transition(
        release=release,
        to=ReleaseStatus.AWAITING_APPROVAL,
        actor=actor,
        reason="every stage passed its guardrails; an operator approves the promotion",
    )


def _withdraw(*, release: Release, actor: Actor, to: str, reason: str) -> Release:
    """Rollback or abort: the baseline serves everyone again; a candidate in canary leaves it."""
    was_serving = release.status in {
        ReleaseStatus.CANARY,
        ReleaseStatus.PAUSED,
        ReleaseStatus.AWAITING_APPROVAL,
    }
    release = _transition(release=release, to=to, actor=actor, reason=reason)
    if was_serving:
        _routing_set(
            tenant=release.tenant,
            model=release.model,
            stable=release.baseline,
            release=release,
            actor=actor,
            reason=f"release {release.pk} {to.replace('_', ' ')}: {reason}"[:300],
        )
        release.candidate.refresh_from_db()
        if release.candidate.status == VersionStatus.CANARY:
            _set_version_status(
                tenant=release.tenant,
                actor=actor,
                version=release.candidate,
                status=VersionStatus.ROLLED_BACK
                if to == ReleaseStatus.ROLLED_BACK
                else VersionStatus.CANDIDATE,
                reason=reason,
            )
    return release


@transaction.atomic
def release_rollback(*, tenant: Tenant, actor: Actor, release_id, reason: str = "") -> Release:
    """Manual (any time before the end) or automatic rollback: the baseline takes all traffic again at once;
    sessions on the candidate move to it on their next request."""
    release = _lock(tenant=tenant, release_id=release_id)
    return _withdraw(
        release=release,
        actor=actor,
        to=ReleaseStatus.ROLLED_BACK,
        reason=reason or f"rolled back by {actor.label}",
    )


@transaction.atomic
def release_abort(*, tenant: Tenant, actor: Actor, release_id, reason: str = "") -> Release:
    release = _lock(tenant=tenant, release_id=release_id)
    return _withdraw(release=release, actor=actor, to=ReleaseStatus.ABORTED, reason=reason or "aborted")


@transaction.atomic
def release_resume(*, tenant: Tenant, actor: Actor, release_id) -> Release:
    """paused → canary at the same stage, counters reset (the operator judged the inconclusive analysis)."""
    release = _lock(tenant=tenant, release_id=release_id)
    if release.status != ReleaseStatus.PAUSED:
        raise Conflict(
            f"only a paused release resumes; this one is {release.status}", code="invalid_transition"
        )
    return _transition(
        release=release,
        to=ReleaseStatus.CANARY,
        actor=actor,
        reason=f"resumed by {actor.label}",
        consecutive_failures=0,
        consecutive_inconclusive=0,
    )


def _check_two_people(*, tenant: Tenant, release: Release, approver: Actor) -> tuple[int, int | None]:
    """The two-person rule compares people, not principals: a key answers to the person who created it
    (`person_behind`), so one person's session and key are one person. An approval that names no person (a
    key from the CLI or the system) is refused, since it could be anyone, the starter included; so is the
    starter's own. Returns (the approver's person, the starter's person or None when no person started it)."""
    from apps.tenants.selectors import person_behind

    approver_person = person_behind(tenant=tenant, actor_kind=approver.kind, actor_id=approver.id)
    if approver_person is None:
        raise Forbidden(
            "this tenant's two-person rule: this approval names no person (the API key was not created "
            "by a member); approve as a person or with a key a member created",
            code="two_person_rule",
        )
    starter_person = person_behind(
        tenant=tenant, actor_kind=release.started_by_kind, actor_id=release.started_by_id
    )
    if approver_person == starter_person or (approver.kind, approver.id) == (
        release.started_by_kind,
        release.started_by_id,
    ):
        raise Forbidden(
            "this tenant's two-person rule: someone other than the person who started the release "
            "must approve it (a key they created counts as them)",
            code="two_person_rule",
        )
    return approver_person, starter_person


def _approval_row(*, actor: Actor, person: int | None, at) -> dict:
    return {"actor": actor.label, "kind": actor.kind, "id": actor.id, "person": person, "at": at.isoformat()}


@transaction.atomic
def release_approve(*, tenant: Tenant, actor: Actor, release_id) -> Release:
    """awaiting_approval → promoted: the candidate becomes production (alias moved, statuses set, all traffic).
    409 unless awaiting approval. Under the tenant's two-person rule: 403 when the person behind the approver
    (a key's creator) started it, or when the approval names no person; and a release that no person started
    (the evolution control plane, a key no member created) takes two different people: the first approval is
    recorded (`approvals`, audited `release.approval`) and the release keeps awaiting approval, the second
    person's promotes it (the same person again: 409 `already_approved`).
    Concurrency: two approvals at once make exactly one transition (conditional update); the other gets 409.
    Locking: the release row while approvals are counted."""
    from apps.tenants.selectors import two_person_rule_on
    from apps.training.services import alias_move

    release = _lock(tenant=tenant, release_id=release_id)
    if release.status != ReleaseStatus.AWAITING_APPROVAL:
        raise Conflict(
            f"the release is {release.status}, not awaiting approval", code="not_awaiting_approval"
        )
    now = timezone.now()
    approvals = list(
        Release.objects.select_for_update().filter(pk=release.pk).values_list("approvals", flat=True).get()
        or []
    )
    approver_person = None
    if two_person_rule_on(tenant=tenant):
        approver_person, starter_person = _check_two_people(tenant=tenant, release=release, approver=actor)
        if starter_person is None:
            if any(row.get("person") == approver_person for row in approvals):
                raise Conflict(
                    "you approved this release already; under the two-person rule another person must",
                    code="already_approved",
                )
            if not approvals:
                approvals.append(_approval_row(actor=actor, person=approver_person, at=now))
                Release.objects.filter(pk=release.pk, status=ReleaseStatus.AWAITING_APPROVAL).update(
                    approvals=approvals
                )
                audit_record(
                    tenant=tenant,
                    actor=actor,
                    verb="release.approval",
                    target=release,
                    data={"approvals": 1, "required": 2, "started_by": release.started_by},
                )
                release.refresh_from_db()
                return release
    approvals.append(_approval_row(actor=actor, person=approver_person, at=now))
    release = _transition(
        release=release,
        to=ReleaseStatus.PROMOTED,
        actor=actor,
        reason=f"approved by {', '.join(row['actor'] for row in approvals)}",
        approved_by=", ".join(row["actor"] for row in approvals)[:150],
        approvals=approvals,
    )
    candidate, baseline = release.candidate, release.baseline
    candidate.refresh_from_db()
    baseline.refresh_from_db()
    _set_version_status(
        tenant=tenant,
        actor=actor,
        version=candidate,
        status=VersionStatus.PRODUCTION,
        reason=f"release {release.pk} promoted",
    )
    if baseline.status == VersionStatus.PRODUCTION:
        _set_version_status(
            tenant=tenant,
            actor=actor,
            version=baseline,
            status=VersionStatus.RETIRED,
            reason=f"replaced by {candidate} (release {release.pk})",
        )
    alias_move(
        tenant=tenant,
        actor=actor,
        name=release.model,
        alias="production",
        version=candidate,
        reason=f"release {release.pk} promoted",
    )
    _routing_set(
        tenant=tenant,
        model=release.model,
        stable=candidate,
        release=release,
        actor=actor,
        reason=f"release {release.pk} promoted",
    )
    return release


# analysis -------------------------------------------------------------------------------------------------------


def _record_analysis(*, release, verdict, decision, measurements) -> AnalysisRun:
    now = timezone.now()
    run = AnalysisRun.objects.create(
        tenant_id=release.tenant_id,
        release=release,
        stage_index=release.stage_index,
        verdict=verdict,
        decision=decision,
        measurements=measurements,
        at=now,
    )
    metrics_publish(
        tenant_id=release.tenant_id,
        stream=release_stream(release.pk),
        payload={
            "kind": "analysis",
            "at": now.isoformat(),
            "verdict": str(verdict),
            "decision": decision,
            "stage_index": release.stage_index,
            "measurements": measurements,
        },
    )
    return run


def _measurement_row(measurement, *, guardrail: dict, index: int) -> dict:
    """One guardrail's measurement as stored and shown: `guardrail` is its index in the release's guardrails
    and `name` its own name (two guardrails may watch one metric), `reason` the verdict in words
    (`verdicts.measurement_explanation`: what was compared, the bounds, the threshold, the samples)."""
    from apps.releases.verdicts import guardrail_name, measurement_explanation

    return {
        "guardrail": index,
        "name": guardrail_name(guardrail),
        "judge": guardrail.get("judge", "point"),
        "threshold": float(guardrail["threshold"]),
        "direction": guardrail["direction"],
        "metric": measurement.metric,
        "candidate": measurement.candidate,
        "baseline": measurement.baseline,
        "candidate_samples": measurement.candidate_samples,
        "baseline_samples": measurement.baseline_samples,
        "verdict": str(measurement.verdict),
        "reason": measurement_explanation(measurement, guardrail),
        "low": measurement.low,
        "high": measurement.high,
    }


def _analyze_evaluation(release: Release) -> Release:
    from apps.evaluation.selectors import eval_run_case_values, eval_run_statuses
    from workers.evaluation.analysis import Guardrail, Verdict, measure
    from workers.evaluation.compare import case_flips

    run_ids = [
        int(run_id)
        for arm in ("candidate", "baseline")
        for run_id in (release.eval_runs.get(arm) or {}).values()
    ]
    statuses = eval_run_statuses(tenant=release.tenant, run_ids=run_ids)
    if any(status in {"queued", "running"} for status in statuses.values()):
        return release
    if any(status == "failed" for status in statuses.values()):
        return _withdraw(
            release=release,
            actor=SYSTEM,
            to=ReleaseStatus.ROLLED_BACK,
            reason="an offline eval run failed; see the eval runs",
        )
    guardrails = [(index, g) for index, g in enumerate(release.guardrails) if g["metric"] == "eval_score"]
    measurements, problems = [], []
    for suite in release.eval_suites.all():
        candidate = eval_run_case_values(
            tenant=release.tenant, run_id=release.eval_runs["candidate"][str(suite.pk)]
        )
        baseline = eval_run_case_values(
            tenant=release.tenant, run_id=release.eval_runs["baseline"][str(suite.pk)]
        )
        flips = case_flips({v.key: v.passed for v in candidate}, {v.key: v.passed for v in baseline})
        if suite.kind == "safety" and flips.regressed:
            problems.append(f"safety regression in {suite.name}: {', '.join(flips.regressed)}")
        for index, guardrail in guardrails:
            measured = measure(
                Guardrail(
                    metric="eval_score",
                    direction=guardrail["direction"],
                    threshold=float(guardrail["threshold"]),
                    min_samples=int(guardrail.get("min_samples", 1)),
                    judge=guardrail.get("judge", "point"),
                ),
                [v.score for v in candidate],
                [v.score for v in baseline],
            )
            row = _measurement_row(measured, guardrail=guardrail, index=index) | {
                "suite": suite.name,
                "regressed": list(flips.regressed),
            }
            measurements.append(row)
            if measured.verdict == Verdict.FAILED:
                problems.append(f"{row['name']} in {suite.name}: {row['reason']}")
    verdict = Verdict.FAILED if problems else Verdict.SUCCESSFUL
    _record_analysis(
        release=release,
        verdict=verdict,
        decision="rollback" if problems else "advance",
        measurements=measurements,
    )
    if problems:
        return _withdraw(
            release=release, actor=SYSTEM, to=ReleaseStatus.ROLLED_BACK, reason="; ".join(problems)
        )
    return _enter_canary(release=release, actor=SYSTEM)


def _analyze_live(release: Release) -> Release:
    from apps.releases.measure import arm_samples
    from workers.evaluation.analysis import Guardrail, Verdict, decide, measure, tick_verdict

    live = [(index, g) for index, g in enumerate(release.guardrails) if g["metric"] != "eval_score"]
    since = release.canary_started_at
    arms = (
        {
            arm: arm_samples(
                tenant=release.tenant, model=release.model, version=str(version.number), since=since
            )
            for arm, version in (("candidate", release.candidate), ("baseline", release.baseline))
        }
        if live
        else {}
    )
    measured = [
        measure(
            Guardrail(
                metric=g["metric"],
                direction=g["direction"],
                threshold=float(g["threshold"]),
                min_samples=int(g.get("min_samples", 30)),
                judge=g.get("judge", "point"),
            ),
            arms["candidate"][g["metric"]],
            arms["baseline"][g["metric"]],
            aggregate="p95" if g["metric"] == "latency_p95" else "mean",
        )
        for _, g in live
    ]
    rows = [
        _measurement_row(measurement, guardrail=g, index=index)
        for measurement, (index, g) in zip(measured, live, strict=True)
    ]
    verdict = tick_verdict(measured) if measured else Verdict.SUCCESSFUL
    stage_ready = (
        release.stage_started_at is None
        or (timezone.now() - release.stage_started_at).total_seconds() >= release.stage_min_seconds
    )
    decision = decide(
        verdict,
        consecutive_failures=release.consecutive_failures,
        consecutive_inconclusive=release.consecutive_inconclusive,
        failure_limit=release.failure_limit,
        inconclusive_limit=release.inconclusive_limit,
        stage_ready=stage_ready,
    )
    action = decision.action
    if release.status == ReleaseStatus.PAUSED:
        action = "wait"  # an operator decides; ticks keep measuring for the page
    elif release.status == ReleaseStatus.AWAITING_APPROVAL and action != "rollback":
        action = "wait"  # a failure still rolls back while the approval is pending
    _record_analysis(
        release=release,
        verdict=verdict,
        decision=action,
        measurements=rows,
    )
    Release.objects.filter(pk=release.pk, status=release.status, stage_index=release.stage_index).update(
        consecutive_failures=decision.consecutive_failures,
        consecutive_inconclusive=decision.consecutive_inconclusive,
        last_verdict=str(verdict),
    )
    release.refresh_from_db()
    if action == "rollback":
        failed = "; ".join(
            f"{row['name']}: {row['reason']}" for row in rows if row["verdict"] == Verdict.FAILED
        )
        return _withdraw(
            release=release, actor=SYSTEM, to=ReleaseStatus.ROLLED_BACK, reason=f"guardrail failed: {failed}"
        )
    if action == "pause":
        return _transition(
            release=release,
            to=ReleaseStatus.PAUSED,
            actor=SYSTEM,
            reason=f"analysis inconclusive {decision.consecutive_inconclusive} times in a row",
        )
    if action == "advance":
        return _advance(release=release, actor=SYSTEM)
    return release


@transaction.atomic
def release_analyze(*, tenant: Tenant, release_id) -> Release:
    """One analysis tick (beat, or an operator's "analyze now"): evaluating → the first canary stage once the
    eval runs are done and pass; in canary, measures every guardrail on both arms and rolls back, pauses,
    advances or waits. A terminal or draft release is left alone. Idempotent in effect: moves are
    conditional, so a tick racing another cannot move a release twice."""
    release = _lock(tenant=tenant, release_id=release_id)
    if release.status == ReleaseStatus.EVALUATING:
        return _analyze_evaluation(release)
    if release.status in {ReleaseStatus.CANARY, ReleaseStatus.PAUSED, ReleaseStatus.AWAITING_APPROVAL}:
        return _analyze_live(release)
    return release
