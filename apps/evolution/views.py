"""Console pages: the tenant's evolution policies; a policy with its settings form, one chart per signal next
to its decision timeline (evidence, approvals, what each decision started), approve / reject for the roles
allowed, and its tool-failure clusters. The page follows the `evolution` stream live."""

from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.views.decorators.http import require_POST

from apps.console.access import console_page
from apps.console.pages import PAGE_SIZE, console_action
from apps.core.errors import DomainError
from apps.evaluation.selectors import eval_suite_list
from apps.evolution import policies, selectors
from apps.evolution.decisions import STREAM, approval_question, decision_approve, decision_reject
from apps.evolution.figures import signal_figures
from apps.evolution.forms import PolicyForm
from apps.evolution.models import DecisionKind, DecisionStatus
from apps.tenants.permissions import Action, role_can
from apps.training.selectors import model_version_list

TIMELINE_LENGTH = PAGE_SIZE
SIGNAL_POINTS = 2000  # the newest points charted per page


def evidence_summary(evidence: dict) -> dict:
    """What the timeline shows of a decision's evidence: the signals that fired (value against threshold),
    example trajectories, clusters and the gate's result. Signals come as a list of {"name", "value", "op",
    "threshold"} or as {name: {...}}."""
    evidence = evidence if isinstance(evidence, dict) else {}
    signals = evidence.get("signals") or []
    if isinstance(signals, dict):
        signals = [
            {"name": name, **(rule if isinstance(rule, dict) else {})} for name, rule in signals.items()
        ]
    rows = [
        {**row, "value": round(row["value"], 4) if isinstance(row.get("value"), float) else row.get("value")}
        for row in signals
        if isinstance(row, dict)
    ]
    return {
        "signals": rows,
        "trajectories": [str(value) for value in evidence.get("trajectories") or []][:10],
        "clusters": list(evidence.get("clusters") or [])[:10],
        "gate": evidence.get("gate") if isinstance(evidence.get("gate"), dict) else None,
    }


def gate_words(gate: dict, *, suite_names: dict) -> str:
    """A policy's gate in a sentence: "20 held-out cases of weather (seed 7); the candidate must beat the
    best production version by at least 0.05; and do no worse on suite safety"."""
    if not gate:
        return "No gate: a new version goes to a release without an offline check."
    if "environment" in gate:
        seed = f" (seed {gate['seed']})" if gate.get("seed") is not None else ""
        words = f"{gate.get('cases', '?')} held-out cases of {gate['environment']}{seed}"
    else:
        words = f"the evaluation suite {suite_names.get(gate.get('suite_id'), gate.get('suite_id'))}"
    gain = gate.get("min_gain")
    words += (
        f"; the candidate must beat the best production version by at least {gain:g}"
        if isinstance(gain, (int, float))
        else "; the candidate must do at least as well as the best production version"
    )
    if gate.get("safety_suite_id") is not None:
        safety = suite_names.get(gate["safety_suite_id"], gate["safety_suite_id"])
        words += f", and no worse on the safety suite {safety}"
    known = {"environment", "cases", "seed", "suite_id", "min_gain", "safety_suite_id"}
    others = [f"{key.replace('_', ' ')} {gate[key]}" for key in sorted(set(gate) - known)]
    if others:
        words += f" (also {', '.join(others)})"
    return words[0].upper() + words[1:] + "."


# started key → (label, console URL name, whether the URL takes the id)
STARTED_LINKS = {
    "releases": ("release", "console:release", True),
    "eval_runs": ("evaluation", "console:eval-run", True),
    "online_runs": ("online run", "console:training-jobs", False),
    "versions": ("version", "console:model-lineage", False),
}


def started_links(started: dict, *, model: str, version_numbers: dict | None = None) -> list[tuple[str, str]]:
    """(text, href) of each run, release and version a decision started; a version by its label ("v3", from
    `version_numbers`: id → number), never its database id."""
    links = []
    version_numbers = version_numbers or {}
    for key, (label, url_name, by_id) in STARTED_LINKS.items():
        for object_id in (started or {}).get(key) or []:
            try:
                if by_id:
                    href = reverse(url_name, args=[object_id])
                elif key == "versions":
                    href = reverse(url_name, args=[model])
                else:
                    href = f"{reverse(url_name)}#online-{object_id}"
            except NoReverseMatch:
                continue
            if key == "versions":
                number = version_numbers.get(object_id)
                links.append((f"{model} v{number}" if number is not None else f"a new {model} version", href))
                continue
            links.append((f"{label} #{object_id}", href))
    return links


@console_page(Action.EVOLUTION_VIEW)
def evolution_home(request):
    return render(
        request,
        "console/evolution.html",
        {
            "policies": selectors.policy_list(tenant=request.tenant),
            "decisions": selectors.decision_list(tenant=request.tenant).select_related("policy")[
                :TIMELINE_LENGTH
            ],
            "can_manage": role_can(request.membership.role, Action.EVOLUTION_MANAGE),
        },
    )


@console_page(Action.EVOLUTION_MANAGE)
def policy_new(request):
    form = PolicyForm(
        request.POST or None,
        initial={
            "mode": "observe",
            "enabled": True,
            "window_seconds": 600,
            "approval_mode": "one_operator",
            "cooldown_seconds": 300,
            "compute_budget_seconds": 3600,
            "decision_ttl_seconds": 3600,
            "harness_proposer": "rule",
        },
        suites=eval_suite_list(tenant=request.tenant),
    )
    if request.method == "POST" and form.is_valid():
        try:
            policy = policies.policy_create(
                tenant=request.tenant, actor=request.actor, **form.service_arguments()
            )
        except DomainError as error:
            form.add_service_errors(error)
        else:
            messages.success(request, "Policy created.")
            return redirect("console:evolution-policy", policy_id=policy.pk)
    return render(
        request, "console/evolution_policy_new.html", {"form": form}, status=400 if form.errors else 200
    )


def _policy_page(request, policy, *, form=None, status=200):
    role = request.membership.role
    can_manage = role_can(role, Action.EVOLUTION_MANAGE)
    if form is None and can_manage:
        form = PolicyForm(
            initial=PolicyForm.initial_of(policy),
            suites=eval_suite_list(tenant=request.tenant),
            policy=policy,
        )
    decisions = list(
        selectors.decision_list(tenant=request.tenant, policy_id=policy.pk).select_related("policy")[
            :TIMELINE_LENGTH
        ]
    )
    started_versions = {
        version_id for decision in decisions for version_id in (decision.started or {}).get("versions") or []
    }
    version_numbers = dict(
        model_version_list(tenant=request.tenant)
        .filter(pk__in=[value for value in started_versions if isinstance(value, int)])
        .values_list("pk", "number")
    )
    points = selectors.signal_series(tenant=request.tenant, policy=policy).order_by("-at", "-id")[
        :SIGNAL_POINTS
    ]
    return render(
        request,
        "console/evolution_policy.html",
        {
            "policy": policy,
            "form": form,
            "gate_words": gate_words(
                policy.gate,
                suite_names=dict(eval_suite_list(tenant=request.tenant).values_list("pk", "name")),
            ),
            "figures": signal_figures(reversed(list(points)), thresholds=policy.signals),
            "timeline": [
                (
                    decision,
                    evidence_summary(decision.evidence),
                    started_links(decision.started, model=policy.model, version_numbers=version_numbers),
                    approval_question(decision) if decision.status == DecisionStatus.PROPOSED else "",
                )
                for decision in decisions
            ],
            "clusters": selectors.cluster_list(tenant=request.tenant, policy_id=policy.pk)[:PAGE_SIZE],
            "stream": STREAM,
            "can_manage": can_manage,
            "can_approve": role_can(role, Action.EVOLUTION_APPROVE),
            "proposed": DecisionStatus.PROPOSED,
            "labels": {"kind": dict(DecisionKind.choices), "status": dict(DecisionStatus.choices)},
        },
        status=status,
    )


@console_page(Action.EVOLUTION_VIEW)
def policy_detail(request, policy_id):
    policy = selectors.policy_get(tenant=request.tenant, policy_id=policy_id)
    return _policy_page(request, policy)


@require_POST
@console_page(Action.EVOLUTION_MANAGE)
def policy_edit(request, policy_id):
    policy = selectors.policy_get(tenant=request.tenant, policy_id=policy_id)  # another tenant's: 404
    form = PolicyForm(request.POST, suites=eval_suite_list(tenant=request.tenant), policy=policy)
    stale = False
    if form.is_valid():
        try:
            policies.policy_update(
                tenant=request.tenant,
                actor=request.actor,
                policy_id=policy.pk,
                revision=form.cleaned_data["revision"],
                **form.service_arguments(),
            )
        except DomainError as error:
            stale = error.code == "policy_stale"
            form.add_service_errors(error)
        else:
            messages.success(request, "Policy saved. Decisions already under way keep their settings.")
            return redirect("console:evolution-policy", policy_id=policy.pk)
    return _policy_page(request, policy, form=form, status=409 if stale else 400)


@require_POST
@console_page(Action.EVOLUTION_MANAGE)
def policy_delete(request, policy_id):
    policy = selectors.policy_get(tenant=request.tenant, policy_id=policy_id)  # another tenant's: 404
    deleted = console_action(
        request,
        lambda: (
            policies.policy_delete(tenant=request.tenant, actor=request.actor, policy_id=policy.pk) or True
        ),
        success="Policy deleted.",
    )
    if deleted:
        return redirect("console:evolution")
    return redirect("console:evolution-policy", policy_id=policy.pk)


@require_POST
@console_page(Action.EVOLUTION_APPROVE)
def decision_approve_view(request, decision_id):
    decision = selectors.decision_get(tenant=request.tenant, decision_id=decision_id)  # another tenant's: 404
    approved = console_action(
        request,
        lambda: decision_approve(tenant=request.tenant, actor=request.actor, decision_id=decision.pk),
    )
    if approved is not None and approved.status == DecisionStatus.APPROVED:
        messages.success(request, "Approved. The control plane carries it out on its next tick.")
    elif approved is not None:
        messages.success(
            request,
            f"Your approval is recorded ({len(approved.approvals)} of {approved.approvals_required}); "
            "another person must approve too.",
        )
    return redirect("console:evolution-policy", policy_id=decision.policy_id)


@require_POST
@console_page(Action.EVOLUTION_APPROVE)
def decision_reject_view(request, decision_id):
    decision = selectors.decision_get(tenant=request.tenant, decision_id=decision_id)  # another tenant's: 404
    console_action(
        request,
        lambda: decision_reject(
            tenant=request.tenant,
            actor=request.actor,
            decision_id=decision.pk,
            reason=request.POST.get("reason", "")[:500],
        ),
        success="Rejected: nothing was started.",
    )
    return redirect("console:evolution-policy", policy_id=decision.policy_id)
