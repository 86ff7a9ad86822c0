"""update_harness: the policy's proposer drafts a harness, which becomes a candidate version."""

from typing import TYPE_CHECKING

from django.db import transaction

from apps.core.errors import DomainError
from apps.core.tasking import task_enqueue
from apps.evolution.choices import DecisionKind, DecisionStatus
from apps.evolution.decisions import decision_note, decision_record, decision_start
from apps.evolution.selectors import decision_get
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


def _update_harness(*, tenant, decision, policy) -> "Decision":
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
    from apps.evolution.harness_versions import harness_candidate_create, harness_propose
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


def _follow_update_harness(*, tenant, decision, policy) -> "Decision":
    if _waited(decision) > GATE_WAIT_SECONDS:
        return _fail(
            tenant, decision, f"no proposal within {GATE_WAIT_SECONDS} s (is an eval worker running?)"
        )
    return decision
