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
from apps.evolution.gate_words import evidence_gate_words, gate_words
from apps.evolution.models import DecisionKind, DecisionStatus
from apps.tenants.permissions import Action, role_can
from apps.training.selectors import model_version_list

TIMELINE_LENGTH = PAGE_SIZE
SIGNAL_POINTS = 2000  # the newest points charted per page


def evidence_summary(
    evidence: dict,
    *,
    version: int | None = None,
    suite_names: dict | None = None,
    cluster_names: dict | None = None,
) -> dict:
    """What the timeline shows of a decision's evidence: the signals that fired (value against threshold),
    example trajectories, clusters (id, the tool and its error) and the gate in a sentence (its outcome once measured, "v2: 33 % held-out,
    best production 20 %; gate passed", else the gate it runs). Signals come as a list of {"name", "value",
    "op", "threshold"} or as {name: {...}}."""
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
        "clusters": [
            (cluster_id, (cluster_names or {}).get(cluster_id, "a cluster no longer kept"))
            for cluster_id in list(evidence.get("clusters") or [])[:10]
        ],
        "gate": evidence_gate_words(evidence, version=version, suite_names=suite_names),
    }


# started key → (console URL name, whether the URL takes the id, the words for one whose row is gone)
STARTED_LINKS = {
    "releases": ("console:release", True, "a release"),
    "eval_runs": ("console:eval-run", True, "an evaluation"),
    "online_runs": ("console:training-jobs", False, "an online run"),
    "versions": ("console:model-lineage", False, ""),
}


def started_names(*, tenant, decisions) -> dict[tuple[str, int], str]:
    """What each release, evaluation, online run and version the decisions started is called on the
    timeline, by what it is ("release of v3 over v2", "evaluation of v3 on weather-smoke", "online run from
    v2", "policy-small v3"), never by its database id: (started key, id) → words. One query per kind."""
    from apps.evaluation.selectors import eval_run_list
    from apps.releases.selectors import release_list
    from apps.training.online import online_run_list

    wanted: dict[str, set[int]] = {key: set() for key in STARTED_LINKS}
    for decision in decisions:
        for key in STARTED_LINKS:
            wanted[key].update(
                value for value in (decision.started or {}).get(key) or [] if isinstance(value, int)
            )
    names: dict[tuple[str, int], str] = {}
    if wanted["releases"]:
        for release in release_list(tenant=tenant).filter(pk__in=wanted["releases"]):
            names["releases", release.pk] = release_words(release)
    if wanted["eval_runs"]:
        for run in eval_run_list(tenant=tenant).filter(pk__in=wanted["eval_runs"]):
            names["eval_runs", run.pk] = f"evaluation of v{run.model_version.number} on {run.suite.name}"
    if wanted["online_runs"]:
        for online_run in online_run_list(tenant=tenant).filter(pk__in=wanted["online_runs"]):
            names["online_runs", online_run.pk] = f"online run from v{online_run.base_version.number}"
    if wanted["versions"]:
        for version in model_version_list(tenant=tenant).filter(pk__in=wanted["versions"]):
            names["versions", version.pk] = f"{version.name} v{version.number}"
    return names


def release_words(release) -> str:
    """A release named by what it releases: "release of v3 over v2"."""
    return f"release of v{release.candidate.number} over v{release.baseline.number}"


def started_links(started: dict, *, model: str, names: dict | None = None) -> list[tuple[str, str]]:
    """(text, href) of each run, release and version a decision started, named from `names` (see
    `started_names`); one whose row is gone is "a release", "a new <model> version"..., never its id."""
    links = []
    names = names or {}
    for key, (url_name, by_id, missing) in STARTED_LINKS.items():
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
            links.append((names.get((key, object_id)) or missing or f"a new {model} version", href))
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
        selectors.decision_list(tenant=request.tenant, policy_id=policy.pk).select_related(
            "policy", "version", "parent"
        )[:TIMELINE_LENGTH]
    )
    names = started_names(tenant=request.tenant, decisions=decisions)
    suite_names = dict(eval_suite_list(tenant=request.tenant).values_list("pk", "name"))
    cluster_ids = {
        cluster_id
        for decision in decisions
        for cluster_id in (decision.evidence or {}).get("clusters") or []
        if isinstance(cluster_id, int)
    }
    cluster_names = {
        cluster.pk: f"{cluster.tool}: {cluster.signature}"[:80]
        for cluster in selectors.cluster_list(tenant=request.tenant, policy_id=policy.pk).filter(
            pk__in=cluster_ids
        )
    }
    points = selectors.signal_series(tenant=request.tenant, policy=policy).order_by("-at", "-id")[
        :SIGNAL_POINTS
    ]
    return render(
        request,
        "console/evolution_policy.html",
        {
            "policy": policy,
            "form": form,
            "gate_words": gate_words(policy.gate, suite_names=suite_names),
            "figures": signal_figures(reversed(list(points)), thresholds=policy.signals),
            "timeline": [
                (
                    decision,
                    evidence_summary(
                        decision.evidence,
                        version=decision.version.number if decision.version is not None else None,
                        suite_names=suite_names,
                        cluster_names=cluster_names,
                    ),
                    started_links(decision.started, model=policy.model, names=names),
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
