"""Every write of evolution policies: created, edited (optimistically, against the revision the editor saw) and
deleted, each in a transaction, validated with field errors, audited (`evolution_policy.*`) and published on the
`evolution` stream.

An edit changes only the policy row: releases, online runs and decisions already started keep what they were
started with (a decision records the `policy_revision` it was taken under)."""

import math
from dataclasses import fields as dataclass_fields

from django.db import transaction

from apps.audit.services import Actor, audit_record
from apps.core.errors import Conflict, ValidationFailed
from apps.core.selectors import get_in_tenant
from apps.evolution.decisions import STREAM
from apps.evolution.models import (
    ApprovalMode,
    Decision,
    DecisionStatus,
    EvolutionPolicy,
    HarnessProposer,
    PolicyMode,
    UpdateKind,
)
from apps.metrics.publish import metrics_publish
from apps.tenants.models import Tenant
from workers.engines.config import TrainConfig
from workers.evolution.signals import SIGNALS

# The signals a policy may watch: those workers.evolution.signals computes and can fire (production's version
# number is there for the charts, not to act on).
KNOWN_SIGNALS = tuple(name for name, doc in SIGNALS.items() if doc.op)
# Shares and divergences: a threshold outside [0, 1] could never fire (or always would).
RATE_SIGNALS = frozenset(
    {"correction_rate", "thumbs_down_rate", "task_success", "tool_failure_rate", "drift_js"}
)
# Counts, costs and durations: never negative.
NON_NEGATIVE_SIGNALS = frozenset(
    {"cost_per_success", "latency_p95_ms", "safety_events", "qualified_volume", "staleness_versions"}
)
# weather: the demo's desk (workers/envs/weather); bfcl: BFCL's held-out split, single-turn (apps.evaluation.bfcl)
KNOWN_ENVIRONMENTS = ("weather", "bfcl")

WINDOW_RANGE = (60, 86_400)
COOLDOWN_MAX = 86_400
DECISION_TTL_RANGE = (60, 7 * 86_400)
COMPUTE_BUDGET_MAX = 86_400  # training seconds per day
CASES_RANGE = (1, 1000)
SAMPLES_PER_STEP_RANGE = (1, 1024)
RECIPE_KEYS = (
    "learning_rate",
    "samples_per_step",
    "publish_every",
    "staleness_bound",
    "rollout_bound",
    "evaluate_every",
)
# A recipe may also carry the online run's `max_steps` and any other engine setting (TrainConfig).
RECIPE_EXTRA_KEYS = frozenset({"max_steps"}) | {
    field.name for field in dataclass_fields(TrainConfig) if field.name not in RECIPE_KEYS
}
GATE_KEYS = frozenset(
    {"environment", "suite_id", "cases", "seed", "min_gain", "safety_suite_id", "categories", "max_tokens"}
)
PLAN_KEYS = frozenset({"stages", "stage_min_seconds", "guardrails", "failure_limit", "inconclusive_limit"})

# What an edit may change (the service's keyword arguments); the rest is the service's own bookkeeping.
EDITABLE = (
    "agent_name",
    "model",
    "mode",
    "enabled",
    "window_seconds",
    "signals",
    "update_kinds",
    "recipe",
    "gate",
    "release_plan",
    "approval_mode",
    "cooldown_seconds",
    "compute_budget_seconds",
    "decision_ttl_seconds",
    "harness_proposer",
    "harness_model",
)


def _is_integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _integer_in(problems: dict, name: str, value, low: int, high: int | None = None) -> None:
    if not _is_integer(value) or value < low or (high is not None and value > high):
        problems[name] = [f"an integer from {low} to {high}" if high is not None else f"an integer ≥ {low}"]


def _signal_problems(signals) -> dict:
    if not isinstance(signals, dict):
        return {"signals": ['an object: {"signal": {"op": ">" or "<", "threshold": number}}']}
    problems = {}
    for name, rule in signals.items():
        key = f"signals.{name}"
        if name not in KNOWN_SIGNALS:
            problems[key] = [f"unknown signal; known: {', '.join(KNOWN_SIGNALS)}"]
            continue
        if not isinstance(rule, dict) or set(rule) - {"op", "threshold"}:
            problems[key] = ['an object {"op": ">" or "<", "threshold": number}']
            continue
        errors = []
        if rule.get("op") not in {">", "<"}:
            errors.append('op must be ">" or "<"')
        threshold = rule.get("threshold")
        if threshold is None or not _is_number(threshold):
            errors.append("threshold must be a number")
        elif name in RATE_SIGNALS and not 0 <= threshold <= 1:
            errors.append("threshold of a rate must be in [0, 1]")
        elif name in NON_NEGATIVE_SIGNALS and threshold < 0:
            errors.append("threshold must be ≥ 0")
        if errors:
            problems[key] = errors
    return problems


def _update_kind_problems(update_kinds, mode) -> dict:
    allowed = {kind.value for kind in UpdateKind}
    if (
        not isinstance(update_kinds, list)
        or not all(isinstance(kind, str) for kind in update_kinds)
        or set(update_kinds) - allowed
        or len(set(update_kinds)) != len(update_kinds)
    ):
        return {"update_kinds": [f"a list of distinct kinds among {', '.join(sorted(allowed))}"]}
    if not update_kinds and mode != PolicyMode.OBSERVE:
        return {"update_kinds": ["allow at least one kind of update, or set the mode to observe"]}
    return {}


def _recipe_problems(recipe) -> dict:
    if not isinstance(recipe, dict):
        return {"recipe": ["an object of the online run's settings"]}
    problems = {}
    unknown = set(recipe) - set(RECIPE_KEYS) - RECIPE_EXTRA_KEYS
    if unknown:
        problems["recipe"] = [f"unknown settings: {', '.join(sorted(unknown))}"]
    if "learning_rate" in recipe:
        rate = recipe["learning_rate"]
        if not _is_number(rate) or not 0 < rate <= 1:
            problems["recipe.learning_rate"] = ["a number in (0, 1]"]
    checks = {
        "samples_per_step": SAMPLES_PER_STEP_RANGE,
        "publish_every": (1, None),
        "staleness_bound": (0, None),
        "rollout_bound": (0, None),
        "evaluate_every": (1, None),
        "max_steps": (1, None),
    }
    for name, (low, high) in checks.items():
        if name in recipe:
            _integer_in(problems, f"recipe.{name}", recipe[name], low, high)
    engine = {key: value for key, value in recipe.items() if key in RECIPE_EXTRA_KEYS - {"max_steps"}}
    if engine and "recipe" not in problems:
        try:
            TrainConfig.from_dict(engine)
        except (TypeError, ValueError) as error:
            problems["recipe"] = [f"invalid engine settings: {error}"]
    return problems


def _gate_problems(*, tenant: Tenant, gate, mode) -> dict:
    from apps.evaluation.selectors import eval_suite_list

    if not isinstance(gate, dict):
        return {"gate": ["an object: environment + cases, or suite_id; min_gain; safety_suite_id"]}
    if not gate:
        if mode == PolicyMode.OBSERVE:
            return {}
        return {"gate": ["every update passes an offline gate: give an environment or a suite_id"]}
    problems = {}
    unknown = set(gate) - GATE_KEYS
    if unknown:
        problems["gate"] = [f"unknown settings: {', '.join(sorted(unknown))}"]
    has_environment, has_suite = "environment" in gate, "suite_id" in gate
    if has_environment == has_suite:
        problems["gate.environment"] = ["give exactly one of environment or suite_id"]
    elif has_environment:
        if gate["environment"] not in KNOWN_ENVIRONMENTS:
            problems["gate.environment"] = [f"unknown environment; known: {', '.join(KNOWN_ENVIRONMENTS)}"]
        if "cases" not in gate:
            problems["gate.cases"] = ["how many cases of the environment the gate runs"]
        if gate["environment"] == "bfcl" and "categories" in gate:
            _bfcl_categories_check(problems, gate["categories"])
    if "categories" in gate and gate.get("environment") != "bfcl":
        problems["gate.categories"] = ["categories belong to a bfcl gate"]
    if "max_tokens" in gate:
        _integer_in(problems, "gate.max_tokens", gate["max_tokens"], 1, 4096)
    suites = eval_suite_list(tenant=tenant)
    for key in ("suite_id", "safety_suite_id"):
        if gate.get(key) is not None and (
            not _is_integer(gate[key]) or not suites.filter(pk=gate[key]).exists()
        ):
            problems[f"gate.{key}"] = ["no such eval suite in this tenant"]
    if "cases" in gate:
        _integer_in(problems, "gate.cases", gate["cases"], *CASES_RANGE)
    if "seed" in gate:
        _integer_in(problems, "gate.seed", gate["seed"], 0)
    if "min_gain" in gate and (not _is_number(gate["min_gain"]) or not -1 <= gate["min_gain"] <= 1):
        problems["gate.min_gain"] = ["a number in [-1, 1]"]
    return problems


def _bfcl_categories_check(problems: dict, categories) -> None:
    """A BFCL gate measures single-turn, non-live categories (the live_* ones stay untouched by tuning)."""
    from workers.envs.bfcl import SINGLE_TURN_CATEGORIES

    if not isinstance(categories, list) or not categories or not all(isinstance(c, str) for c in categories):
        problems["gate.categories"] = ["a non-empty list of BFCL category names"]
        return
    unknown = [name for name in categories if name not in SINGLE_TURN_CATEGORIES]
    if unknown:
        problems["gate.categories"] = [
            f"not a single-turn, non-live BFCL category: {', '.join(unknown)};"
            f" known: {', '.join(SINGLE_TURN_CATEGORIES)}"
        ]


def _plan_problems(plan) -> dict:
    from apps.releases.services import DEFAULT_STAGES, release_plan_validate

    if not isinstance(plan, dict):
        return {"release_plan": ["an object: stages, stage_min_seconds, guardrails, limits"]}
    problems = {}
    unknown = set(plan) - PLAN_KEYS
    if unknown:
        problems["release_plan"] = [f"unknown settings: {', '.join(sorted(unknown))}"]
    for name, default in (("failure_limit", 0), ("inconclusive_limit", 3), ("stage_min_seconds", 0)):
        _integer_in(problems, f"release_plan.{name}", plan.get(name, default), 0)
    if problems:
        return problems
    try:
        release_plan_validate(
            stages=plan.get("stages", DEFAULT_STAGES),
            guardrails=plan.get("guardrails", []),
            failure_limit=plan.get("failure_limit", 0),
            inconclusive_limit=plan.get("inconclusive_limit", 3),
        )
    except ValidationFailed as error:
        for name, texts in error.fields.items():
            problems[f"release_plan.{name}"] = list(texts)
    return problems


def _contradictions(values: dict) -> dict:
    """Settings that are each in range but cannot hold together."""
    from apps.releases.services import DEFAULT_STAGES

    problems = {}
    mode, approval = values["mode"], values["approval_mode"]
    if approval == ApprovalMode.AUTOMATIC and mode == PolicyMode.PROPOSE:
        problems["approval_mode"] = [
            "automatic approval contradicts the propose mode (every decision waits for a person)"
        ]
    if (
        mode == PolicyMode.AUTO
        and UpdateKind.WEIGHTS in (values["update_kinds"] or [])
        and values["compute_budget_seconds"] == 0
    ):
        problems["compute_budget_seconds"] = [
            "automatic weight updates need a training budget above 0 (or leave out the weights update)"
        ]
    plan = values["release_plan"]
    if mode == PolicyMode.AUTO and approval == ApprovalMode.AUTOMATIC and isinstance(plan, dict):
        stages = plan.get("stages", DEFAULT_STAGES)
        if isinstance(stages, list) and stages and stages[0] == 100 and not plan.get("stage_min_seconds"):
            problems["release_plan.stages"] = [
                "with automatic approval a release must start below 100% or hold its stage a while: "
                "otherwise a candidate serves everyone at once and no one looks"
            ]
        if not plan.get("guardrails"):
            problems["release_plan.guardrails"] = [
                "automatic approval needs at least one guardrail: nothing else could stop a bad candidate"
            ]
    return problems


def _proposer_problems(proposer, model) -> dict:
    if proposer not in HarnessProposer.values:
        return {"harness_proposer": [f"one of {', '.join(HarnessProposer.values)}"]}
    if not isinstance(model, str) or len(model) > 200:
        return {"harness_model": ["a served model's name (at most 200 characters)"]}
    if proposer == HarnessProposer.MODEL and not model.strip():
        return {"harness_model": ["the model proposer needs the served model that rewrites the prompt"]}
    return {}


def policy_problems(*, tenant: Tenant, values: dict) -> dict[str, list[str]]:
    """Every problem of a policy's settings, by field (`signals.<name>`, `recipe.<key>`, `gate.<key>`,
    `release_plan.<key>` for the parts of the JSON settings); empty when they hold."""
    problems: dict[str, list[str]] = {}
    model = values["model"]
    if not isinstance(model, str) or not model.strip() or len(model) > 200:
        problems["model"] = ["the served model's name (1 to 200 characters)"]
    agent = values["agent_name"]
    if not isinstance(agent, str) or len(agent) > 200:
        problems["agent_name"] = ["at most 200 characters; blank: every agent"]
    if values["mode"] not in PolicyMode.values:
        problems["mode"] = [f"one of {', '.join(PolicyMode.values)}"]
    if values["approval_mode"] not in ApprovalMode.values:
        problems["approval_mode"] = [f"one of {', '.join(ApprovalMode.values)}"]
    if not isinstance(values["enabled"], bool):
        problems["enabled"] = ["true or false"]
    _integer_in(problems, "window_seconds", values["window_seconds"], *WINDOW_RANGE)
    _integer_in(problems, "cooldown_seconds", values["cooldown_seconds"], 0, COOLDOWN_MAX)
    _integer_in(problems, "compute_budget_seconds", values["compute_budget_seconds"], 0, COMPUTE_BUDGET_MAX)
    _integer_in(problems, "decision_ttl_seconds", values["decision_ttl_seconds"], *DECISION_TTL_RANGE)
    problems.update(_proposer_problems(values["harness_proposer"], values["harness_model"]))
    problems.update(_signal_problems(values["signals"]))
    problems.update(_update_kind_problems(values["update_kinds"], values["mode"]))
    problems.update(_recipe_problems(values["recipe"]))
    problems.update(_gate_problems(tenant=tenant, gate=values["gate"], mode=values["mode"]))
    problems.update(_plan_problems(values["release_plan"]))
    if not problems:
        problems.update(_contradictions(values))
    return problems


def validate_policy(*, tenant: Tenant, values: dict) -> None:
    """Raises ValidationFailed (400, `invalid_policy`) with every field's problems."""
    problems = policy_problems(tenant=tenant, values=values)
    if problems:
        raise ValidationFailed(
            "the policy's settings are invalid: " + "; ".join(sorted(problems)),
            code="invalid_policy",
            fields=problems,
        )


def _refuse_unknown(fields: dict) -> None:
    unknown = set(fields) - set(EDITABLE)
    if unknown:
        raise ValidationFailed(
            f"unknown policy settings: {', '.join(sorted(unknown))}",
            code="invalid_policy",
            fields={name: ["not a policy setting"] for name in unknown},
        )


def _refuse_duplicate(*, tenant: Tenant, values: dict, excluding=None) -> None:
    others = EvolutionPolicy.objects.for_tenant(tenant).filter(
        model=values["model"], agent_name=values["agent_name"]
    )
    if excluding is not None:
        others = others.exclude(pk=excluding)
    if others.exists():
        raise Conflict(
            f"a policy for {values['model']} and agent {values['agent_name'] or '*'} exists already",
            code="policy_exists",
            fields={"model": ["this model and agent have a policy already"]},
        )


def _settings(policy: EvolutionPolicy) -> dict:
    return {name: getattr(policy, name) for name in EDITABLE}


def _publish(policy: EvolutionPolicy, *, deleted: bool = False) -> None:
    metrics_publish(
        tenant_id=policy.tenant_id,
        stream=STREAM,
        payload={"type": "policy", "id": policy.pk, "revision": policy.revision, "deleted": deleted},
    )


def policy_lock(*, tenant: Tenant, policy_id) -> EvolutionPolicy:
    """The tenant's policy, its row locked until the caller's transaction ends (call it inside one); another
    tenant's, or a missing one, is NotFound `policy_not_found`."""
    return get_in_tenant(
        EvolutionPolicy.objects.select_for_update(), tenant=tenant, code="policy_not_found", pk=policy_id
    )


def policy_lock_enabled(*, tenant: Tenant, policy_id) -> EvolutionPolicy | None:
    """The tenant's policy when it is enabled, its row locked until the caller's transaction ends (a tick's
    entry, apps.loop.control); None when it is gone or disabled."""
    return (
        EvolutionPolicy.objects.for_tenant(tenant)
        .select_for_update()
        .filter(pk=policy_id, enabled=True)
        .first()
    )


def policy_tick_mark(*, policy_id: int, at) -> None:
    """Records that the policy ticked at `at` (`last_tick_at`: a tick message older than it is skipped). Not
    audited: a tick is the control plane's routine, its decisions are audited."""
    EvolutionPolicy.objects.filter(pk=policy_id).update(last_tick_at=at)


@transaction.atomic
def policy_create(*, tenant: Tenant, actor: Actor, **fields) -> EvolutionPolicy:
    """A new policy of `tenant` (settings not given take the model's defaults). 400 with field errors for
    settings out of range, unknown or contradictory; 409 when the model and agent have a policy already.
    Audited `evolution_policy.create` with the settings; published."""
    _refuse_unknown(fields)
    values = {**_settings(EvolutionPolicy()), **fields}
    if isinstance(values["agent_name"], str):
        values["agent_name"] = values["agent_name"].strip()
    validate_policy(tenant=tenant, values=values)
    _refuse_duplicate(tenant=tenant, values=values)
    policy = EvolutionPolicy.objects.create(tenant=tenant, updated_by=actor.label, revision=1, **values)
    audit_record(
        tenant=tenant, actor=actor, verb="evolution_policy.create", target=policy, data={"settings": values}
    )
    _publish(policy)
    return policy


@transaction.atomic
def policy_update(*, tenant: Tenant, actor: Actor, policy_id, revision: int, **fields) -> EvolutionPolicy:
    """Changes the settings given, if the policy is still at `revision` (the one the editor saw): else 409
    `policy_stale`, nothing changed. Locks the row; bumps the revision. Decisions, online runs and releases
    already started keep what they were started with. Audited `evolution_policy.update` with what changed."""
    _refuse_unknown(fields)
    policy = policy_lock(tenant=tenant, policy_id=policy_id)
    if not _is_integer(revision) or revision != policy.revision:
        raise Conflict(
            f"the policy changed since you read it (revision {policy.revision}, yours {revision}); "
            "reload it and edit again",
            code="policy_stale",
        )
    before = _settings(policy)
    values = {**before, **fields}
    if isinstance(values["agent_name"], str):
        values["agent_name"] = values["agent_name"].strip()
    validate_policy(tenant=tenant, values=values)
    _refuse_duplicate(tenant=tenant, values=values, excluding=policy.pk)
    changed = {name: values[name] for name in EDITABLE if values[name] != before[name]}
    for name, value in values.items():
        setattr(policy, name, value)
    policy.revision += 1  # the row is locked: no other edit reads the old revision meanwhile
    policy.updated_by = actor.label
    policy.save(update_fields=[*EDITABLE, "revision", "updated_by"])  # never the control loop's last_tick_at
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="evolution_policy.update",
        target=policy,
        data={"revision": policy.revision, "changed": changed},
    )
    _publish(policy)
    return policy


@transaction.atomic
def policy_delete(*, tenant: Tenant, actor: Actor, policy_id, revision: int | None = None) -> None:
    """Deletes the policy with its signal points, clusters and closed decisions. 409 `policy_busy` while one
    of its decisions is approved or running (what it started would lose its follow-up: pause or wait), 409
    `policy_stale` for a `revision` that is not the current one. Audited `evolution_policy.delete`."""
    policy = policy_lock(tenant=tenant, policy_id=policy_id)
    if revision is not None and revision != policy.revision:
        raise Conflict("the policy changed since you read it; reload it", code="policy_stale")
    busy = Decision.objects.for_tenant(tenant).filter(
        policy=policy, status__in=(DecisionStatus.APPROVED, DecisionStatus.RUNNING)
    )
    if busy.exists():
        raise Conflict(
            "a decision of this policy is under way; wait for it to finish or disable the policy",
            code="policy_busy",
        )
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="evolution_policy.delete",
        target=policy,
        data={"model": policy.model, "agent_name": policy.agent_name, "revision": policy.revision},
    )
    _publish(policy, deleted=True)
    policy.delete()
