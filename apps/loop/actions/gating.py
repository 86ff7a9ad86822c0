"""evaluate: the policy's gate measured on the decision's version (an environment or a suite)."""

from contextlib import contextmanager
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction

from apps.core.tasking import task_enqueue
from apps.evolution.choices import DecisionKind
from apps.evolution.decisions import decision_record, decision_start
from apps.evolution.gate_words import gate_outcome, gate_score_words, percent
from apps.evolution.selectors import decision_get, gate_key, gate_score, production_versions
from apps.loop.actions.common import (
    GATE_WAIT_SECONDS,
    _fail,
    _note,
    _production,
    _succeed,
    _waited,
    policy_actor,
)
from apps.tenants.models import Tenant

if TYPE_CHECKING:
    from apps.evolution.models import Decision


def gate_measure(*, tenant: Tenant, version, gate: dict) -> float:
    """Measures `version` on an environment gate (held-out cases of `gate["environment"]`), stores the score
    in its metrics (`gate` by gate key, and `heldout`) and returns it; a version already measured by that
    gate is not measured again."""
    from apps.training.services import model_version_update_metrics
    from workers.envs import weather
    from workers.envs.warmup import heldout_success

    known = gate_score(version, gate)
    if known is not None:
        return known
    with _gate_threads():
        if (
            gate.get("environment") == "bfcl"
        ):  # BFCL's held-out split, scored by its checker (apps.evaluation.bfcl)
            from apps.evaluation.bfcl import bfcl_gate_heldout

            result = bfcl_gate_heldout(version.checkpoint_path, gate)
        elif gate.get("environment") == "weather":
            seed = int(gate.get("seed", 0))
            tasks = weather.make_tasks(split="heldout", count=int(gate.get("cases", 64)), seed=seed)
            result = heldout_success(version.checkpoint_path, tasks, seed=seed)
        else:
            raise ValueError(f"no environment gate named {gate.get('environment')!r}")
    entry = {"score": result.success, "cases": result.cases, "reasons": dict(result.reasons)}
    if getattr(result, "per_category", None):
        entry["per_category"] = result.per_category
    version.refresh_from_db()
    model_version_update_metrics(
        tenant=tenant,
        version_id=version.pk,
        metrics={
            "gate": {**(version.metrics.get("gate") or {}), gate_key(gate): entry},
            "heldout": {"success": result.success, "cases": result.cases, "reasons": dict(result.reasons)},
        },
    )
    return result.success


@contextmanager
def _gate_threads():
    """torch's intra-op threads for an environment gate's in-process engine (AREAL_GATE_THREADS; 0 leaves
    torch's own choice), restored afterwards for the worker's next task."""
    import torch

    wanted = settings.AREAL_GATE_THREADS
    before = torch.get_num_threads()
    if wanted:
        torch.set_num_threads(wanted)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def gate_run(*, tenant_id: int, decision_id: int) -> dict:
    """The `evolution.evaluate` task's body: measures every version the decision names (the candidate, and
    production when it has no score of this gate yet)."""
    from apps.training.selectors import model_version_get

    tenant = Tenant.objects.get(pk=tenant_id)
    decision = decision_get(tenant=tenant, decision_id=decision_id)
    gate = decision.evidence.get("gate") or decision.policy.gate
    scores = {}
    for version_id in (decision.started or {}).get("versions", []):
        version = model_version_get(tenant=tenant, version_id=version_id)
        scores[version.number] = gate_measure(tenant=tenant, version=version, gate=gate)
    return scores


def _evaluate(*, tenant, decision, policy) -> "Decision":
    from apps.evaluation.services import eval_run_start

    gate = dict(policy.gate or {})
    candidate = decision.version
    if candidate is None:
        return _fail(tenant, decision, "no version to evaluate")
    production = _production(tenant=tenant, policy=policy)
    if gate.get("suite_id"):
        runs = [
            eval_run_start(
                tenant=tenant, actor=policy_actor(policy), suite_id=gate["suite_id"], version_id=candidate.pk
            )
        ]
        if production is not None and _suite_score(tenant=tenant, gate=gate, version=production) is None:
            runs.append(
                eval_run_start(
                    tenant=tenant,
                    actor=policy_actor(policy),
                    suite_id=gate["suite_id"],
                    version_id=production.pk,
                )
            )
        _note(decision, gate=gate)
        return decision_start(
            tenant=tenant,
            decision_id=decision.pk,
            started={"eval_runs": [run.pk for run in runs], "versions": [candidate.pk]},
            outcome=f"the gate runs v{candidate.number}{' and production' if len(runs) > 1 else ''} "
            + gate_score_words(gate, suite_names=_suite_names(tenant=tenant, gate=gate)),
        )
    if not gate.get("environment"):
        return _fail(tenant, decision, "the policy's gate names no environment and no suite")
    versions = [candidate.pk]
    if production is not None and gate_score(production, gate) is None:
        versions.append(production.pk)
    _note(decision, gate=gate)
    started = decision_start(
        tenant=tenant,
        decision_id=decision.pk,
        started={"versions": versions},
        outcome=f"{gate['environment']} gate ({gate.get('cases')} held-out cases) on v{candidate.number}",
    )
    transaction.on_commit(lambda: _enqueue_gate(tenant.pk, decision.pk))
    return started


def _enqueue_gate(tenant_id: int, decision_id: int) -> None:
    task_enqueue("evolution.evaluate", tenant_id, decision_id)


def _suite_score(*, tenant, gate, version) -> float | None:
    from apps.evaluation.choices import RunStatus
    from apps.evaluation.selectors import eval_run_list

    run = (
        eval_run_list(tenant=tenant, suite_id=gate["suite_id"], version_id=version.pk)
        .filter(status=RunStatus.SUCCEEDED)
        .first()
    )
    return None if run is None else run.summary.get("score")


def _follow_evaluate(*, tenant, decision, policy) -> "Decision":

    gate = decision.evidence.get("gate") or policy.gate
    candidate = decision.version
    candidate.refresh_from_db()
    if gate.get("suite_id"):
        score = _suite_score(tenant=tenant, gate=gate, version=candidate)
        failed = _suite_failed(tenant=tenant, decision=decision)
        if failed:
            return _fail(tenant, decision, failed)
    else:
        score = gate_score(candidate, gate)
    production = production_versions(tenant=tenant, model=policy.model)
    known = [
        _suite_score(tenant=tenant, gate=gate, version=version)
        if gate.get("suite_id")
        else gate_score(version, gate)
        for version in production
    ]
    if score is None or (production and known[-1] is None):
        if _waited(decision) > GATE_WAIT_SECONDS:
            return _fail(tenant, decision, f"the gate gave no score within {GATE_WAIT_SECONDS}s")
        return decision
    best = max((value for value in known if value is not None), default=None)
    min_gain = float(gate.get("min_gain", 0.0))
    passed = best is None or score >= best + min_gain
    evidence = {
        "gate_score": score,
        "best_production_score": best,
        "production_score": known[-1] if known else None,
        "min_gain": min_gain,
        "passed": passed,
    }
    finished = _succeed(
        tenant,
        decision,
        gate_outcome(
            version=f"v{candidate.number}",
            score=score,
            best_production=best,
            min_gain=min_gain,
            passed=passed,
            measure=gate_score_words(gate, suite_names=_suite_names(tenant=tenant, gate=gate)),
        ),
        evidence=evidence,
    )
    actor = policy_actor(policy)
    if passed:
        decision_record(
            tenant=tenant,
            policy=policy,
            kind=DecisionKind.RELEASE,
            reason=f"v{candidate.number} passed the gate ({percent(score)}); release it over production",
            evidence={**evidence, "candidate": candidate.number},
            actor=actor,
            parent=finished,
            version=candidate,
        )
    else:
        decision_record(
            tenant=tenant,
            policy=policy,
            kind=DecisionKind.RESTART_LEARNER,
            reason=(
                f"v{candidate.number} failed the gate ({percent(score)}): the learner starts again from production"
            ),
            evidence={**evidence, "candidate": candidate.number},
            actor=actor,
            parent=finished,
        )
    return finished


def _suite_names(*, tenant, gate) -> dict:
    """The suite gate's suite by name, for the outcome's sentence ("on the suite weather-smoke")."""
    from apps.evaluation.selectors import eval_suite_list

    if gate.get("suite_id") is None:
        return {}
    return dict(eval_suite_list(tenant=tenant).filter(pk=gate["suite_id"]).values_list("pk", "name"))


def _suite_failed(*, tenant, decision) -> str:
    from apps.evaluation.choices import RunStatus
    from apps.evaluation.selectors import eval_run_statuses

    statuses = eval_run_statuses(tenant=tenant, run_ids=(decision.started or {}).get("eval_runs", []))
    bad = [run_id for run_id, status in statuses.items() if status == RunStatus.FAILED]
    return f"eval run(s) {bad} failed" if bad else ""
