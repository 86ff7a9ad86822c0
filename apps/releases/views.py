"""Console pages: releases, a release with live candidate-vs-baseline charts and its verdicts, the approve and
roll-back actions (shown only to roles allowed to take them), and the serving timeline."""

from django.contrib import messages
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from apps.console.access import console_page
from apps.console.pages import PAGE_SIZE, console_action, query_without_page
from apps.releases import analysis, approval, selectors, services
from apps.releases.figures import deficit, guardrail_figures, release_figures, serving_figure
from apps.releases.forms import ProductionSetForm, ReleaseCreateForm
from apps.releases.models import ACTIVE_STATUSES, ReleaseStatus
from apps.releases.release_words import release_outcome, release_title
from apps.releases.verdicts import guardrail_name
from apps.tenants.permissions import Action, role_can

# The newest rows a page shows (the REST lists page through them all: /api/v1/releases/<id>/events/,
# /analyses/, /api/v1/serving-history/).
ANALYSES_SHOWN = 500
EVENTS_SHOWN = 200
SERVING_EVENTS_SHOWN = 500


def guardrail_words(guardrail: dict, row: dict | None) -> dict:
    """What a guardrail asks and what its newest measurement shows, in words: the threshold ("fails when the
    candidate is worse by more than 0.05"), the samples against the minimum, the interval of the deficit."""
    threshold = float(guardrail.get("threshold", 0))
    needed = int(guardrail.get("min_samples", 30))
    better = "lower" if guardrail.get("direction") == "lower_is_better" else "higher"
    judge = (
        "the whole 95 % interval of the deficit"
        if guardrail.get("judge") == "interval"
        else "the measured deficit"
    )
    words = {
        "rule": f"{better} is better; fails when {judge} exceeds {threshold:g}",
        "samples": f"needs {needed} per arm",
        "interval": "",
    }
    if row is None:
        return words
    candidate_samples, baseline_samples = row.get("candidate_samples", 0), row.get("baseline_samples", 0)
    enough = min(candidate_samples, baseline_samples) >= needed
    words["samples"] = (
        f"{candidate_samples} candidate and {baseline_samples} baseline samples of the {needed} needed per arm"
        + ("" if enough else ": not enough yet")
    )
    point, low, high = deficit(row)
    if low is not None and high is not None:
        words["interval"] = f"worse by {low:+.4g} to {high:+.4g} (95 % interval)"
    elif point is not None:
        words["interval"] = f"worse by {point:+.4g} (no interval)"
    return words


def approval_words(release) -> dict:
    """What approving a release awaiting approval does, and the question the confirmation asks: both name the
    candidate version and the share of traffic it goes to."""
    candidate, baseline = f"v{release.candidate.number}", f"v{release.baseline.number}"
    now = f"{release.stage_percent:g} %" if release.stage_index >= 0 else "no"
    return {
        "effect": (
            f"Approving promotes {candidate} of {release.model} to production: the production alias moves from "
            f"{baseline} to {candidate}, {candidate} takes 100 % of new sessions (it takes {now} of them now) "
            f"and {baseline} is retired."
        ),
        "question": (
            f"Promote {candidate} of {release.model} to production? It takes 100 % of new sessions and "
            f"{baseline} is retired."
        ),
    }


def refusal_words(message: str) -> str:
    """A refusal of `release_create` as the form's first line says it: "The release was not created: another
    release of policy-small is active; finish or abort it first." """
    message = message.strip().rstrip(".")
    return f"The release was not created: {message}." if message else "The release was not created."


def _newest(rows, count: int) -> list:
    """The newest `count` rows of an oldest-first queryset, oldest first."""
    return list(reversed(rows.order_by("-at", "-id")[:count]))


@console_page(Action.RELEASE_VIEW)
def release_list(request):
    """The tenant's releases, newest first, a page at a time, filtered on the server by status and model."""
    status = request.GET.get("status") or None
    if status not in ReleaseStatus.values:
        status = None
    models = selectors.release_model_names(tenant=request.tenant)
    model = request.GET.get("model") or None
    if model not in models:
        model = None
    page = Paginator(
        selectors.release_list(tenant=request.tenant, status=status, model=model), PAGE_SIZE
    ).get_page(request.GET.get("page"))
    return render(
        request,
        "console/releases.html",
        {
            "page": page,
            "rows": [(release, release_outcome(release)) for release in page],
            "query": query_without_page(request),
            "statuses": ReleaseStatus.choices,
            "status": status or "",
            "models": models,
            "model": model or "",
            "can_manage": role_can(request.membership.role, Action.RELEASE_MANAGE),
        },
    )


@console_page(Action.RELEASE_MANAGE)
def release_new(request):
    """A draft release of a candidate version; its page has the Start button (which loads the candidate)."""
    from apps.core.errors import DomainError
    from apps.evaluation.selectors import eval_suite_list
    from apps.training.models import VersionStatus
    from apps.training.selectors import model_version_list

    versions = list(model_version_list(tenant=request.tenant))
    form = ReleaseCreateForm(
        request.POST or None,
        candidates=[version for version in versions if version.status == VersionStatus.CANDIDATE],
        versions=versions,
        suites=eval_suite_list(tenant=request.tenant),
    )
    if request.method == "POST" and form.is_valid():
        try:
            release = services.release_create(
                tenant=request.tenant, actor=request.actor, **form.service_arguments()
            )
        except DomainError as error:
            for field, problems in (error.fields or {}).items():
                name = field.split("[", 1)[0]
                name = {"candidate_id": "candidate", "baseline_id": "baseline"}.get(name, name)
                for problem in problems:
                    if not form.add_guardrail_error(field, problem):
                        form.add_error(name if name in form.fields else None, f"{field}: {problem}")
            form.add_error(None, refusal_words(error.message))
        else:
            messages.success(
                request,
                f"Drafted the {release_title(release)} ({release.model}); start it to load and evaluate the "
                "candidate.",
            )
            return redirect("console:release", release_id=release.pk)
    return render(request, "console/release_new.html", {"form": form}, status=400 if form.errors else 200)


@require_POST
@console_page(Action.RELEASE_MANAGE)
def release_abort(request, release_id):
    selectors.release_get(tenant=request.tenant, release_id=release_id)  # another tenant's: 404
    console_action(
        request,
        lambda: services.release_abort(
            tenant=request.tenant,
            actor=request.actor,
            release_id=release_id,
            reason=request.POST.get("reason", "")[:300] or f"aborted by {request.actor.label}",
        ),
        success="Aborted: the baseline serves every session.",
    )
    return redirect("console:release", release_id=release_id)


@console_page(Action.RELEASE_VIEW)
def release_detail(request, release_id):
    release = selectors.release_get(tenant=request.tenant, release_id=release_id)
    analyses = _newest(
        selectors.release_analyses(tenant=request.tenant, release_id=release.pk), ANALYSES_SHOWN
    )
    role = request.membership.role
    latest = analyses[-1] if analyses else None
    # The newest measurement of each guardrail, by its index (two guardrails may watch one metric); rows
    # recorded before measurements carried the index are matched by metric.
    measured: dict = {}
    for run in analyses:
        for row in run.measurements:
            if row.get("suite") is None:
                measured[row.get("guardrail", row["metric"])] = row
    return render(
        request,
        "console/release_detail.html",
        {
            "release": release,
            "events": _newest(
                selectors.release_events(tenant=request.tenant, release_id=release.pk), EVENTS_SHOWN
            ),
            "latest": latest,
            "figures": release_figures(analyses),
            "guardrail_rows": [
                (index, guardrail_name(guardrail), guardrail, row, guardrail_words(guardrail, row))
                for index, guardrail in enumerate(release.guardrails)
                for row in [measured.get(index, measured.get(guardrail["metric"]))]
            ],
            "guardrail_figures": guardrail_figures(analyses, release.guardrails),
            "approval": approval_words(release),
            "stream": services.release_stream(release.pk),
            "can_approve": role_can(role, Action.RELEASE_APPROVE)
            and release.status == ReleaseStatus.AWAITING_APPROVAL,
            "can_rollback": role_can(role, Action.RELEASE_ROLLBACK)
            and release.status in ACTIVE_STATUSES
            and release.status != ReleaseStatus.DRAFT,
            "can_manage": role_can(role, Action.RELEASE_MANAGE),
        },
    )


@require_POST
@console_page(Action.RELEASE_APPROVE)
def release_approve(request, release_id):
    selectors.release_get(tenant=request.tenant, release_id=release_id)  # another tenant's: 404
    release = console_action(
        request,
        lambda: approval.release_approve(tenant=request.tenant, actor=request.actor, release_id=release_id),
    )
    if release is not None and release.status == ReleaseStatus.PROMOTED:
        messages.success(request, "Promoted.")
    elif release is not None:
        messages.success(
            request,
            "Your approval is recorded. Under the two-person rule a release no person started needs a second "
            "person's approval before it is promoted.",
        )
    return redirect("console:release", release_id=release_id)


@require_POST
@console_page(Action.RELEASE_ROLLBACK)
def release_rollback(request, release_id):
    selectors.release_get(tenant=request.tenant, release_id=release_id)  # another tenant's: 404
    console_action(
        request,
        lambda: services.release_rollback(
            tenant=request.tenant,
            actor=request.actor,
            release_id=release_id,
            reason=request.POST.get("reason", "")[:300],
        ),
        success="Rolled back: the baseline serves every session again.",
    )
    return redirect("console:release", release_id=release_id)


@require_POST
@console_page(Action.RELEASE_MANAGE)
def release_start(request, release_id):
    selectors.release_get(tenant=request.tenant, release_id=release_id)  # another tenant's: 404
    console_action(
        request,
        lambda: services.release_start(tenant=request.tenant, actor=request.actor, release_id=release_id),
        success="Started: offline evaluation queued.",
    )
    return redirect("console:release", release_id=release_id)


@require_POST
@console_page(Action.RELEASE_MANAGE)
def release_resume(request, release_id):
    selectors.release_get(tenant=request.tenant, release_id=release_id)  # another tenant's: 404
    console_action(
        request,
        lambda: services.release_resume(tenant=request.tenant, actor=request.actor, release_id=release_id),
        success="Resumed.",
    )
    return redirect("console:release", release_id=release_id)


@require_POST
@console_page(Action.RELEASE_MANAGE)
def release_analyze(request, release_id):
    selectors.release_get(tenant=request.tenant, release_id=release_id)  # another tenant's: 404
    console_action(
        request,
        lambda: analysis.release_analyze(tenant=request.tenant, release_id=release_id),
        success="Analysed.",
    )
    return redirect("console:release", release_id=release_id)


@console_page(Action.SERVING_VIEW)
def serving(request):
    return _serving_page(request)


def _servable_versions(tenant):
    from apps.training.models import VersionStatus
    from apps.training.selectors import model_version_list

    return model_version_list(tenant=tenant).filter(
        status__in=[VersionStatus.CANDIDATE, VersionStatus.PRODUCTION]
    )


def _serving_page(request, *, production_form=None):
    model = request.GET.get("model") or None
    events = _newest(selectors.serving_history(tenant=request.tenant, model=model), SERVING_EVENTS_SHOWN)
    if role_can(request.membership.role, Action.RELEASE_MANAGE) and production_form is None:
        production_form = ProductionSetForm(versions=_servable_versions(request.tenant))
    return render(
        request,
        "console/serving_timeline.html",
        {
            "events": list(reversed(events)),
            "figure": serving_figure(events),
            "model": model or "",
            "routing": selectors.routing_states(tenant=request.tenant),
            "production_form": production_form,
        },
        status=400 if production_form is not None and production_form.errors else 200,
    )


@require_POST
@console_page(Action.RELEASE_MANAGE)
def serving_production(request):
    """A model's first production version (apps/releases/serving.py `production_set`)."""
    from apps.core.errors import DomainError
    from apps.releases.serving import production_set

    form = ProductionSetForm(request.POST, versions=_servable_versions(request.tenant))
    if form.is_valid():
        try:
            state = production_set(
                tenant=request.tenant,
                actor=request.actor,
                version_id=form.cleaned_data["version"],
                reason=form.cleaned_data["reason"],
            )
        except DomainError as error:
            form.add_error("version" if error.code.startswith("version_") else None, error.message)
        else:
            messages.success(request, f"{state.model} v{state.stable.number} serves every new session.")
            return redirect("console:serving")
    return _serving_page(request, production_form=form)
