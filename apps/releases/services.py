"""A release's lifecycle: its plan and creation, the start (the candidate provisioned, the eval runs), the
canary stages, rollback, abort and resume. Each write runs in a transaction, moves a release only along
RELEASE_TRANSITIONS with a conditional update (`release_transition`; zero rows: someone else moved it first →
409), and records the move in ReleaseEvent and the audit chain. The approval is in `approval`, the analysis
ticks in `analysis`, the routing and the versions' statuses in `routing_writes`."""

from typing import TYPE_CHECKING

from django.db import transaction
from django.utils import timezone

from apps.audit.services import Actor, audit_record
from apps.core.errors import Conflict, NotFound, ValidationFailed
from apps.core.selectors import get_in_tenant
from apps.core.tasking import task_enqueue_on_commit
from apps.metrics.publish import metrics_publish
from apps.releases.models import (
    ACTIVE_STATUSES,
    RELEASE_TRANSITIONS,
    Release,
    ReleaseEvent,
    ReleaseStatus,
    RoutingState,
)
from apps.releases.release_words import release_name
from apps.releases.routing_writes import routing_set, version_status_set
from apps.tenants.models import Tenant
from apps.training.choices import VersionStatus
from workers.evaluation.analysis import guardrail_problems

if TYPE_CHECKING:
    from apps.training.models import ModelVersion

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


def release_lock(*, tenant: Tenant, release_id) -> Release:
    """The tenant's release with its candidate and baseline (another tenant's: 404 `release_not_found`). It
    takes no row lock: each move is claimed by `release_transition`'s conditional update instead."""
    return get_in_tenant(
        Release.objects.select_related("candidate", "baseline"),
        tenant=tenant,
        pk=release_id,
        code="release_not_found",
    )


def release_transition(
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


def release_start(*, tenant: Tenant, actor: Actor, release_id) -> Release:
    """draft → evaluating, once the candidate is on a serving slot: a draft's candidate is loaded onto a free
    backend of the model first when none holds its weights (`provisioning.candidate_provision`, outside any
    transaction: a call to a server), or the start is refused with the reason (409 `version_has_no_weights`,
    `no_free_slot`, `provision_failed`) and the release stays a draft. Then, in one transaction
    (`_release_begin`): one eval run per suite for the candidate and the baseline (enqueued on commit); the next
    analysis tick moves on to the first canary stage once they are done. Records who started it (the two-person
    rule compares the approver with this person)."""
    from apps.releases.provisioning import candidate_provision

    release = release_lock(tenant=tenant, release_id=release_id)
    loaded = ""
    if release.status == ReleaseStatus.DRAFT:
        _releasable(candidate=release.candidate, baseline=release.baseline)
        loaded = candidate_provision(tenant=tenant, actor=actor, release=release)
    return _release_begin(tenant=tenant, actor=actor, release_id=release.pk, loaded=loaded)


@transaction.atomic
def _release_begin(*, tenant: Tenant, actor: Actor, release_id, loaded: str) -> Release:
    from apps.evaluation.services import eval_run_start

    release = release_lock(tenant=tenant, release_id=release_id)
    _releasable(candidate=release.candidate, baseline=release.baseline)
    runs: dict[str, dict] = {"candidate": {}, "baseline": {}}
    for suite in release.eval_suites.all():
        for arm, version in (("candidate", release.candidate), ("baseline", release.baseline)):
            runs[arm][str(suite.pk)] = eval_run_start(
                tenant=tenant, actor=actor, suite_id=suite.pk, version_id=version.pk
            ).pk
    release = release_transition(
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


def release_enter_canary(*, release: Release, actor: Actor) -> Release:
    """evaluating → the first canary stage: the candidate's status canary, routing at the first percent. Runs
    inside the caller's transaction (`analysis.release_analyze`)."""
    now = timezone.now()
    release = release_transition(
        release=release,
        to=ReleaseStatus.CANARY,
        actor=actor,
        stage_index=0,
        reason=f"offline evaluation passed; stage 1 at {release.stages[0]}%",
        canary_started_at=now,
        stage_started_at=now,
    )
    version_status_set(
        tenant=release.tenant,
        actor=actor,
        version=release.candidate,
        status=VersionStatus.CANARY,
        reason=f"canary ({release_name(release)})",
    )
    routing_set(
        tenant=release.tenant,
        model=release.model,
        stable=release.baseline,
        canary=release.candidate,
        percent=release.stage_percent,
        release=release,
        actor=actor,
        reason=f"{release_name(release)}: canary {release.stage_percent:g} %",
    )
    return release


def release_advance(*, release: Release, actor: Actor) -> Release:
    """The next canary stage (routing at its percent, counters reset), or awaiting approval after the last.
    Runs inside the caller's transaction (`analysis.release_analyze`)."""
    if release.stage_index + 1 < len(release.stages):
        release = release_transition(
            release=release,
            to=ReleaseStatus.CANARY,
            actor=actor,
            stage_index=release.stage_index + 1,
            stage_started_at=timezone.now(),
            reason=f"stage {release.stage_index + 2} at {release.stages[release.stage_index + 1]}%",
            consecutive_failures=0,
            consecutive_inconclusive=0,
        )
        routing_set(
            tenant=release.tenant,
            model=release.model,
            stable=release.baseline,
            canary=release.candidate,
            percent=release.stage_percent,
            release=release,
            actor=actor,
            reason=f"{release_name(release)}: canary {release.stage_percent:g} %",
        )
        return release
    return release_transition(
        release=release,
        to=ReleaseStatus.AWAITING_APPROVAL,
        actor=actor,
        reason="every stage passed its guardrails; an operator approves the promotion",
    )


def release_withdraw(*, release: Release, actor: Actor, to: str, reason: str) -> Release:
    """Rollback or abort: the baseline serves everyone again; a candidate in canary leaves it."""
    was_serving = release.status in {
        ReleaseStatus.CANARY,
        ReleaseStatus.PAUSED,
        ReleaseStatus.AWAITING_APPROVAL,
    }
    release = release_transition(release=release, to=to, actor=actor, reason=reason)
    if was_serving:
        routing_set(
            tenant=release.tenant,
            model=release.model,
            stable=release.baseline,
            release=release,
            actor=actor,
            reason=f"{release_name(release)} {to.replace('_', ' ')}: {reason}"[:300],
        )
        release.candidate.refresh_from_db()
        if release.candidate.status == VersionStatus.CANARY:
            version_status_set(
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
    release = release_lock(tenant=tenant, release_id=release_id)
    return release_withdraw(
        release=release,
        actor=actor,
        to=ReleaseStatus.ROLLED_BACK,
        reason=reason or f"rolled back by {actor.label}",
    )


@transaction.atomic
def release_abort(*, tenant: Tenant, actor: Actor, release_id, reason: str = "") -> Release:
    release = release_lock(tenant=tenant, release_id=release_id)
    return release_withdraw(
        release=release, actor=actor, to=ReleaseStatus.ABORTED, reason=reason or "aborted"
    )


@transaction.atomic
def release_resume(*, tenant: Tenant, actor: Actor, release_id) -> Release:
    """paused → canary at the same stage, counters reset (the operator judged the inconclusive analysis)."""
    release = release_lock(tenant=tenant, release_id=release_id)
    if release.status != ReleaseStatus.PAUSED:
        raise Conflict(
            f"only a paused release resumes; this one is {release.status}", code="invalid_transition"
        )
    return release_transition(
        release=release,
        to=ReleaseStatus.CANARY,
        actor=actor,
        reason=f"resumed by {actor.label}",
        consecutive_failures=0,
        consecutive_inconclusive=0,
    )
