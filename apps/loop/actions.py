"""Carries out the control plane's decisions with the services the product already has.

`decision_execute` takes an approved decision (approved → running, or straight to succeeded | failed);
`decision_follow` looks at a running one (its online run, gate or release) and finishes it when it ended.
Neither blocks: what takes time (a learner stopping, a gate measuring, a canary) is looked at again on the
next tick. A service's refusal (a domain error) fails the decision with the refusal as its outcome.

- train → an online run from production with the policy's recipe (`publish_to_backends=False`: releases
  decide what serves);
- evaluate → the policy's gate on the decision's version: `{"environment": "weather", "cases", "seed"}` is
  measured by the `evolution.evaluate` task (eval queue), `{"suite_id"}` by an `apps.evaluation` run; the
  score must reach the best production score + `min_gain` (negative: a tolerance); pass → a child `release`
  decision, fail → a child `restart_learner`;
- release → the candidate loaded on the policy model's backend not serving production (a harness-only
  candidate is served by its `weights_of` backends: nothing to load), then a release with the policy's plan;
- promote → `release_approve` by the person who approved the decision (or the policy, automatic mode);
- rollback → `release_rollback` of the release under way, else production back to its previous version
  (`apps.releases.services.production_restore`);
- update_harness → the policy's proposer (rule or model) drafts a harness from the failing cluster in the
  `evolution.propose` task (eval queue); it becomes a candidate version over production's weights, and a
  child `evaluate` decision takes it through the same gate, canary and approval as weights;
- restart_learner → stop the learner, and once it left `running`, start a new one from production;
- pause_learning → stop the learner.
"""

import logging

from django.db import transaction

from apps.audit.services import Actor
from apps.core.errors import Conflict, DomainError, Forbidden
from apps.core.tasking import task_enqueue
from apps.evolution.choices import DecisionKind, DecisionStatus
from apps.evolution.decisions import decision_finish, decision_note, decision_record, decision_start
from apps.evolution.models import Decision, EvolutionPolicy
from apps.evolution.selectors import decision_get, gate_key, gate_score, production_versions
from apps.tenants.models import Tenant

logger = logging.getLogger(__name__)

# Keys of `recipe` that are the online run's own settings; the rest are its hyperparameters.
RUN_SETTINGS = ("samples_per_step", "publish_every", "staleness_bound", "max_steps")
NOT_HYPERPARAMETERS = (*RUN_SETTINGS, "evaluate_every")
STOP_WAIT_SECONDS = 300  # a learner that does not leave `running` in this long fails a restart
GATE_WAIT_SECONDS = 1800  # a gate that gives no score in this long fails its evaluation


def policy_actor(policy: EvolutionPolicy) -> Actor:
    return Actor.system(f"evolution policy {policy.pk}")


def _production(*, tenant: Tenant, policy: EvolutionPolicy):
    from apps.training.selectors import alias_resolve

    return alias_resolve(tenant=tenant, name=policy.model, alias="production")


def _learner(*, tenant: Tenant, policy: EvolutionPolicy):
    from apps.training.online import online_run_active

    run = online_run_active(tenant=tenant)
    return run if run is not None and run.model_name == policy.model else None


def _fail(tenant: Tenant, decision: Decision, outcome: str, **more) -> Decision:
    return decision_finish(tenant=tenant, decision_id=decision.pk, succeeded=False, outcome=outcome, **more)


def _succeed(tenant: Tenant, decision: Decision, outcome: str, **more) -> Decision:
    return decision_finish(tenant=tenant, decision_id=decision.pk, succeeded=True, outcome=outcome, **more)


def decision_execute(*, tenant: Tenant, decision: Decision) -> Decision:
    """Starts an approved decision; returns it running, succeeded or failed."""
    decision = decision_get(tenant=tenant, decision_id=decision.pk)
    if decision.status != DecisionStatus.APPROVED:
        return decision
    handler = _EXECUTE.get(DecisionKind(decision.kind))
    if handler is None:
        return _fail(tenant, decision, f"no action carries out a {decision.kind} decision")
    try:
        return handler(tenant=tenant, decision=decision, policy=decision.policy)
    except DomainError as error:
        return _fail(tenant, decision, f"refused ({error.code}): {error.message}")


def decision_follow(*, tenant: Tenant, decision: Decision) -> Decision:
    """Looks at a running decision and finishes it when what it started ended; returns it."""
    decision = decision_get(tenant=tenant, decision_id=decision.pk)
    if decision.status != DecisionStatus.RUNNING:
        return decision
    handler = _FOLLOW.get(DecisionKind(decision.kind))
    if handler is None:
        return _succeed(tenant, decision, decision.outcome or "done")
    try:
        return handler(tenant=tenant, decision=decision, policy=decision.policy)
    except DomainError as error:
        return _fail(tenant, decision, f"refused ({error.code}): {error.message}")


# ---- learners ----------------------------------------------------------------------------------------------


def learner_start(*, tenant: Tenant, policy: EvolutionPolicy, actor: Actor):
    """An online run of `policy.model` from production with the policy's recipe (serving nothing itself)."""
    from apps.training.online import online_run_start

    production = _production(tenant=tenant, policy=policy)
    if production is None:
        raise Conflict(f"{policy.model} has no production version to learn from", code="no_production")
    recipe = policy.recipe or {}
    settings = {key: recipe[key] for key in RUN_SETTINGS if key in recipe}
    return online_run_start(
        tenant=tenant,
        actor=actor,
        base_version=production,
        hyperparameters={key: value for key, value in recipe.items() if key not in NOT_HYPERPARAMETERS},
        publish_to_backends=False,
        **settings,
    )


def _train(*, tenant, decision, policy) -> Decision:
    running = _learner(tenant=tenant, policy=policy)
    if running is not None:
        return _fail(tenant, decision, f"a learner already runs (online run {running.pk})")
    run = learner_start(tenant=tenant, policy=policy, actor=policy_actor(policy))
    return _succeed(
        tenant,
        decision,
        f"online run {run.pk} learns from production v{run.base_version.number}",
        started={"online_runs": [run.pk]},
    )


def _stop_learner(*, tenant, decision, policy, verb: str) -> Decision | None:
    """Asks the policy's learner to stop; the decision runs until it left `running` (None: there was none)."""
    from apps.training.online import online_run_stop

    running = _learner(tenant=tenant, policy=policy)
    if running is None:
        return None
    _note(decision)
    online_run_stop(tenant=tenant, actor=policy_actor(policy), run_id=running.pk)
    return decision_start(
        tenant=tenant,
        decision_id=decision.pk,
        started={"online_runs": [running.pk]},
        outcome=f"{verb}: online run {running.pk} asked to stop",
    )


def _restart_learner(*, tenant, decision, policy) -> Decision:
    stopping = _stop_learner(tenant=tenant, decision=decision, policy=policy, verb="restart")
    if stopping is not None:
        return stopping
    return _start_again(tenant=tenant, decision=decision, policy=policy)


def _start_again(*, tenant, decision, policy) -> Decision:
    run = learner_start(tenant=tenant, policy=policy, actor=policy_actor(policy))
    return _succeed(
        tenant,
        decision,
        f"online run {run.pk} learns again from production v{run.base_version.number}",
        started={"online_runs": [run.pk]},
    )


def _stopped(*, decision) -> tuple[bool, float]:
    """Whether every online run the decision asked to stop left `running`, and seconds since it started."""

    from apps.training.choices import OnlineRunStatus
    from apps.training.models import OnlineRun

    ids = (decision.started or {}).get("online_runs", [])
    still = OnlineRun.objects.filter(pk__in=ids, status=OnlineRunStatus.RUNNING).exists()
    return not still, _waited(decision)


def _follow_restart(*, tenant, decision, policy) -> Decision:
    stopped, waited = _stopped(decision=decision)
    if stopped:
        return _start_again(tenant=tenant, decision=decision, policy=policy)
    if waited > STOP_WAIT_SECONDS:
        return _fail(tenant, decision, f"the learner did not stop within {STOP_WAIT_SECONDS}s")
    return decision


def _pause_learning(*, tenant, decision, policy) -> Decision:
    stopping = _stop_learner(tenant=tenant, decision=decision, policy=policy, verb="pause")
    if stopping is None:
        return _succeed(tenant, decision, "no learner was running")
    return stopping


def _follow_pause(*, tenant, decision, policy) -> Decision:
    stopped, waited = _stopped(decision=decision)
    if stopped:
        return _succeed(tenant, decision, "learning paused: the learner stopped")
    if waited > STOP_WAIT_SECONDS:
        return _fail(tenant, decision, f"the learner did not stop within {STOP_WAIT_SECONDS}s")
    return decision


# ---- the gate ----------------------------------------------------------------------------------------------


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


def gate_run(*, tenant_id: int, decision_id: int) -> dict:
    """The `evolution.evaluate` task's body: measures every version the decision names (the candidate, and
    production when it has no score of this gate yet)."""
    from apps.training.models import ModelVersion

    tenant = Tenant.objects.get(pk=tenant_id)
    decision = decision_get(tenant=tenant, decision_id=decision_id)
    gate = decision.evidence.get("gate") or decision.policy.gate
    scores = {}
    for version_id in (decision.started or {}).get("versions", []):
        version = ModelVersion.objects.get(tenant=tenant, pk=version_id)
        scores[version.number] = gate_measure(tenant=tenant, version=version, gate=gate)
    return scores


def _evaluate(*, tenant, decision, policy) -> Decision:
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
            outcome=f"suite {gate['suite_id']} runs on v{candidate.number}",
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


def _note(decision: Decision, **values) -> None:
    """Keeps `values` in the decision's evidence before it starts: the gate it runs (a policy edit meanwhile
    does not change it) and when it started (what waits on a worker gives up after a while)."""
    from django.utils import timezone

    noted = decision_note(
        tenant=decision.tenant,
        decision_id=decision.pk,
        evidence={"started_at": timezone.now().isoformat(), **values},
    )
    decision.evidence = noted.evidence


def _waited(decision: Decision) -> float:
    """Seconds since the decision started (see _note; without a note, since it was recorded)."""
    from datetime import datetime

    from django.utils import timezone

    noted = decision.evidence.get("started_at")
    since = datetime.fromisoformat(noted) if noted else decision.created_at
    return (timezone.now() - since).total_seconds()


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


def _follow_evaluate(*, tenant, decision, policy) -> Decision:

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
    versus = "no production score" if best is None else f"best production {best:.0%} {min_gain:+.0%}"
    finished = _succeed(
        tenant,
        decision,
        f"v{candidate.number} {'passed' if passed else 'failed'} the gate: {score:.0%} vs {versus}",
        evidence=evidence,
    )
    actor = policy_actor(policy)
    if passed:
        decision_record(
            tenant=tenant,
            policy=policy,
            kind=DecisionKind.RELEASE,
            reason=f"v{candidate.number} passed the gate ({score:.0%}); release it over production",
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
            reason=f"v{candidate.number} failed the gate ({score:.0%}): the learner starts again from production",
            evidence={**evidence, "candidate": candidate.number},
            actor=actor,
            parent=finished,
        )
    return finished


def _suite_failed(*, tenant, decision) -> str:
    from apps.evaluation.choices import RunStatus
    from apps.evaluation.selectors import eval_run_statuses

    statuses = eval_run_statuses(tenant=tenant, run_ids=(decision.started or {}).get("eval_runs", []))
    bad = [run_id for run_id, status in statuses.items() if status == RunStatus.FAILED]
    return f"eval run(s) {bad} failed" if bad else ""


# ---- releases ----------------------------------------------------------------------------------------------


def _release(*, tenant, decision, policy) -> Decision:
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
    where = f" {loaded}," if loaded else ""
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
        outcome=f"release {release.pk}: v{candidate.number}{where} over production v{production.number}",
    )


def _follow_release(*, tenant, decision, policy) -> Decision:
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
    outcome = f"release {release.pk} (v{release.candidate.number}) {label}"
    if release.status_reason:
        outcome += f": {release.status_reason}"
    evidence = {"release": release.pk, "release_status": release.status}
    if release.status == ReleaseStatus.PROMOTED:
        return _succeed(tenant, decision, outcome, evidence=evidence)
    return _fail(tenant, decision, outcome, evidence=evidence)


def _approver(decision: Decision, policy: EvolutionPolicy) -> Actor:
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


def _approvers(decision: Decision, policy: EvolutionPolicy) -> list[Actor]:
    """Every person who approved the decision, in order (automatic mode: the policy)."""
    if decision.approvals:
        return [Actor(kind=row["kind"], id=row["id"], label=row["actor"]) for row in decision.approvals]
    return [policy_actor(policy)]


def _promote(*, tenant, decision, policy) -> Decision:
    """`release_approve` by each person who approved the decision, in turn, until the release is promoted: one
    approval promotes it, except under the tenant's two-person rule, where a release the control plane started
    takes two different people (the decision then asked for two: `decisions.approvals_required`). A refusal
    (403 `two_person_rule`, 409 `already_approved` for someone who approved on the release's page) moves on to
    the next approver; the last refusal fails the decision."""
    from apps.releases.choices import ReleaseStatus
    from apps.releases.services import release_approve

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
                f"release {release.pk}: v{release.candidate.number} promoted by {release.approved_by}",
                started={"releases": [release.pk]},
            )
    if refusal is not None:
        raise refusal
    return _fail(
        tenant,
        decision,
        f"release {release.pk} still awaits a second person's approval (the tenant's two-person rule)",
        started={"releases": [release.pk]},
    )


def _rollback(*, tenant, decision, policy) -> Decision:
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
        f"release {release.pk} (v{release.candidate.number}) rolled back",
        started={"releases": [release.pk]},
    )


def _restore_previous(*, tenant, decision, policy) -> Decision:
    """No release under way: production goes back to the version it had before (apps.releases'
    production_restore: statuses, alias and routing, audited), and the learner is not touched."""
    from apps.releases.services import production_restore
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


def _update_harness(*, tenant, decision, policy) -> Decision:
    """The proposer runs in the `evolution.propose` task (eval queue): a model proposer waits on a backend,
    which the tick must not (it holds the policy's lock)."""
    production = _production(tenant=tenant, policy=policy)
    if production is None:
        return _fail(tenant, decision, "no production version to put a harness on")
    if not decision.evidence.get("clusters"):
        return _fail(tenant, decision, "the decision names no failing cluster")
    _note(decision)
    started = decision_start(
        tenant=tenant,
        decision_id=decision.pk,
        outcome=f"the {policy.harness_proposer} proposer drafts a harness over production v{production.number}",
    )
    transaction.on_commit(lambda: _enqueue_proposal(tenant.pk, decision.pk))
    return started


def _enqueue_proposal(tenant_id: int, decision_id: int) -> None:
    task_enqueue("evolution.propose", tenant_id, decision_id)


def _proposer(*, tenant, policy):
    from apps.evolution.choices import HarnessProposer
    from apps.loop.proposing import model_complete
    from workers.evolution.proposers import ModelProposer, RuleProposer

    if policy.harness_proposer == HarnessProposer.MODEL:
        return ModelProposer(model_complete(tenant=tenant, model=policy.harness_model))
    return RuleProposer()


def harness_run(*, tenant_id: int, decision_id: int) -> str:
    """The `evolution.propose` task's body: the policy's proposer drafts a harness from the decision's failing
    cluster (rule: memory from qualified successes; model: a prompt rewritten from the failures); the
    harness becomes a candidate version over production's weights, the decision succeeds, and a child
    `evaluate` decision takes the candidate through the same gate, canary and approval as weights."""
    import httpx

    from apps.evolution.choices import HarnessProposer
    from apps.evolution.harness import harness_candidate_create, harness_propose
    from apps.evolution.selectors import harness_inputs

    tenant = Tenant.objects.get(pk=tenant_id)
    decision = decision_get(tenant=tenant, decision_id=decision_id)
    if decision.status != DecisionStatus.RUNNING or decision.kind != DecisionKind.UPDATE_HARNESS:
        return f"skipped: the decision is {decision.status}"
    policy = decision.policy
    production = _production(tenant=tenant, policy=policy)
    inputs = harness_inputs(tenant=tenant, policy=policy, cluster_ids=decision.evidence.get("clusters") or [])
    if production is None or inputs is None:
        _fail(tenant, decision, "production or the failing cluster is gone")
        return "failed"
    cluster, successes, failures = inputs
    examples = failures if policy.harness_proposer == HarnessProposer.MODEL else successes
    try:
        harness = harness_propose(
            tenant=tenant,
            actor=policy_actor(policy),
            proposer=_proposer(tenant=tenant, policy=policy),
            production_version=production,
            cluster=cluster,
            examples=examples,
        )
    except (DomainError, httpx.HTTPError) as error:
        _fail(tenant, decision, f"the proposer failed: {error}")
        return "failed"
    if harness is None:
        _fail(
            tenant,
            decision,
            f"the {policy.harness_proposer} proposer had nothing to propose for {cluster['tool']}",
        )
        return "failed"
    with transaction.atomic():
        candidate = harness_candidate_create(
            tenant=tenant, actor=policy_actor(policy), harness=harness, production_version=production
        )
        decision_note(tenant=tenant, decision_id=decision.pk, harness=harness, version=candidate)
        finished = _succeed(
            tenant,
            decision,
            f"harness {harness.label} proposed ({_routing_summary(harness)}): candidate v{candidate.number} "
            f"over production v{production.number}",
            started={"versions": [candidate.pk], "harness_versions": [harness.pk]},
        )
        decision_record(
            tenant=tenant,
            policy=policy,
            kind=DecisionKind.EVALUATE,
            reason=f"harness {harness.label} (v{candidate.number}) is evaluated like any candidate",
            evidence={"clusters": [cluster["id"]], "harness": harness.pk},
            actor=policy_actor(policy),
            parent=finished,
            version=candidate,
            harness=harness,
        )
    return f"{harness.label} as v{candidate.number}"


def _routing_summary(harness) -> str:
    parts = [
        f"{tool} → {route.get('to')}" if route.get("action") == "route" else f"{tool} disabled"
        for tool, route in sorted(harness.tool_routing.items())
    ]
    if harness.system_prompt:
        parts.append("system prompt")
    if harness.exemplars:
        parts.append(f"{len(harness.exemplars)} exemplar(s)")
    return ", ".join(parts) or "no change"


def _follow_update_harness(*, tenant, decision, policy) -> Decision:
    if _waited(decision) > GATE_WAIT_SECONDS:
        return _fail(
            tenant, decision, f"no proposal within {GATE_WAIT_SECONDS} s (is an eval worker running?)"
        )
    return decision


def _nothing(*, tenant, decision, policy) -> Decision:
    return _succeed(tenant, decision, "nothing to do")


_EXECUTE = {
    DecisionKind.TRAIN: _train,
    DecisionKind.EVALUATE: _evaluate,
    DecisionKind.RELEASE: _release,
    DecisionKind.PROMOTE: _promote,
    DecisionKind.ROLLBACK: _rollback,
    DecisionKind.PAUSE_LEARNING: _pause_learning,
    DecisionKind.RESTART_LEARNER: _restart_learner,
    DecisionKind.UPDATE_HARNESS: _update_harness,
    DecisionKind.NOTHING: _nothing,
}
_FOLLOW = {
    DecisionKind.UPDATE_HARNESS: _follow_update_harness,
    DecisionKind.EVALUATE: _follow_evaluate,
    DecisionKind.RELEASE: _follow_release,
    DecisionKind.PAUSE_LEARNING: _follow_pause,
    DecisionKind.RESTART_LEARNER: _follow_restart,
}
