"""A release's analysis ticks (`release_analyze`): evaluating → canary once its eval runs pass, and in canary
every guardrail measured on both arms, each tick an AnalysisRun published on the release's stream, and the
release rolled back, paused, advanced or left waiting through the lifecycle's moves (`services`)."""

from django.db import transaction
from django.utils import timezone

from apps.audit.services import Actor
from apps.metrics.publish import metrics_publish
from apps.releases.models import AnalysisRun, Release, ReleaseStatus
from apps.releases.services import (
    release_advance,
    release_enter_canary,
    release_lock,
    release_stream,
    release_transition,
    release_withdraw,
)
from apps.tenants.models import Tenant

SYSTEM = Actor.system("release-analysis")


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
        return release_withdraw(
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
        return release_withdraw(
            release=release, actor=SYSTEM, to=ReleaseStatus.ROLLED_BACK, reason="; ".join(problems)
        )
    return release_enter_canary(release=release, actor=SYSTEM)


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
        return release_withdraw(
            release=release, actor=SYSTEM, to=ReleaseStatus.ROLLED_BACK, reason=f"guardrail failed: {failed}"
        )
    if action == "pause":
        return release_transition(
            release=release,
            to=ReleaseStatus.PAUSED,
            actor=SYSTEM,
            reason=f"analysis inconclusive {decision.consecutive_inconclusive} times in a row",
        )
    if action == "advance":
        return release_advance(release=release, actor=SYSTEM)
    return release


@transaction.atomic
def release_analyze(*, tenant: Tenant, release_id) -> Release:
    """One analysis tick (beat, or an operator's "analyze now"): evaluating → the first canary stage once the
    eval runs are done and pass; in canary, measures every guardrail on both arms and rolls back, pauses,
    advances or waits. A terminal or draft release is left alone. Idempotent in effect: moves are
    conditional, so a tick racing another cannot move a release twice."""
    release = release_lock(tenant=tenant, release_id=release_id)
    if release.status == ReleaseStatus.EVALUATING:
        return _analyze_evaluation(release)
    if release.status in {ReleaseStatus.CANARY, ReleaseStatus.PAUSED, ReleaseStatus.AWAITING_APPROVAL}:
        return _analyze_live(release)
    return release
