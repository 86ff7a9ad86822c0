"""Console pages: suites with their cases and runs, a run's per-case results, and a run compared with a
baseline run (metric differences with bootstrap intervals, flipped cases)."""

from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from apps.console.access import console_page
from apps.console.pages import console_action
from apps.core.errors import DomainError
from apps.evaluation import selectors, services
from apps.evaluation.apis import comparison_data
from apps.evaluation.forms import CaseCreateForm, SuiteCreateForm
from apps.tenants.permissions import Action, role_can
from apps.training.selectors import model_version_list


def _form_refused(form, error: DomainError) -> None:
    """A service's refusal on the form: beside the fields it names (a case's messages count as the user's),
    else above the form."""
    for field, problems in (error.fields or {}).items():
        name = "user" if field == "input_messages" else field
        for problem in problems:
            form.add_error(name if name in form.fields else None, problem)
    form.add_error(None, error.message)


@console_page(Action.EVAL_VIEW)
def suite_list(request):
    return _suites_page(request)


def _suites_page(request, *, form=None):
    can_manage = role_can(request.membership.role, Action.EVAL_MANAGE)
    return render(
        request,
        "console/eval_suites.html",
        {
            "suites": selectors.eval_suite_list(tenant=request.tenant),
            "runs": selectors.eval_run_list(tenant=request.tenant)[:50],
            "suite_form": (form or SuiteCreateForm()) if can_manage else None,
        },
        status=400 if form is not None and form.errors else 200,
    )


@require_POST
@console_page(Action.EVAL_MANAGE)
def suite_create(request):
    form = SuiteCreateForm(request.POST)
    if form.is_valid():
        try:
            suite = services.eval_suite_create(
                tenant=request.tenant, actor=request.actor, **form.cleaned_data
            )
        except DomainError as error:
            _form_refused(form, error)
        else:
            messages.success(request, f"Suite {suite.name} created; add its cases.")
            return redirect("console:eval-suite", suite_id=suite.pk)
    return _suites_page(request, form=form)


@console_page(Action.EVAL_VIEW)
def suite_detail(request, suite_id):
    return _suite_page(request, suite_id)


def _suite_page(request, suite_id, *, case_form=None):
    suite = selectors.eval_suite_get(tenant=request.tenant, suite_id=suite_id)
    can_run = role_can(request.membership.role, Action.EVAL_MANAGE)
    return render(
        request,
        "console/eval_suite.html",
        {
            "suite": suite,
            "cases": selectors.eval_case_list(tenant=request.tenant, suite_id=suite.pk),
            "runs": selectors.eval_run_list(tenant=request.tenant, suite_id=suite.pk)[:50],
            "versions": model_version_list(tenant=request.tenant),
            "can_run": can_run,
            "case_form": (case_form or CaseCreateForm()) if can_run else None,
        },
        status=400 if case_form is not None and case_form.errors else 200,
    )


@require_POST
@console_page(Action.EVAL_MANAGE)
def case_create(request, suite_id):
    suite = selectors.eval_suite_get(tenant=request.tenant, suite_id=suite_id)  # another tenant's: 404
    form = CaseCreateForm(request.POST)
    if form.is_valid():
        try:
            case = services.eval_case_create(
                tenant=request.tenant, actor=request.actor, suite_id=suite.pk, **form.service_arguments()
            )
        except DomainError as error:
            _form_refused(form, error)
        else:
            messages.success(request, f"Case {case.key} added.")
            return redirect("console:eval-suite", suite_id=suite.pk)
    return _suite_page(request, suite.pk, case_form=form)


@require_POST
@console_page(Action.EVAL_MANAGE)
def run_start(request, suite_id):
    selectors.eval_suite_get(tenant=request.tenant, suite_id=suite_id)  # another tenant's: 404, not a message
    run = console_action(
        request,
        lambda: services.eval_run_start(
            tenant=request.tenant,
            actor=request.actor,
            suite_id=suite_id,
            version_id=request.POST.get("version_id"),
        ),
    )
    if run is None:
        return redirect("console:eval-suite", suite_id=suite_id)
    messages.success(
        request,
        f"Evaluation of {run.model_version.name} v{run.model_version.number} on {run.suite.name} queued on "
        "the eval workers.",
    )
    return redirect("console:eval-run", run_id=run.pk)


@console_page(Action.EVAL_VIEW)
def run_detail(request, run_id):
    run = selectors.eval_run_get(tenant=request.tenant, run_id=run_id)
    results = list(selectors.eval_results(tenant=request.tenant, run_id=run.pk))
    summary = run.summary or {}
    context = {
        "run": run,
        "figures": [
            (name, value)
            for name, value in summary.items()
            if isinstance(value, int | float) and not isinstance(value, bool)
        ],
        "interval": summary.get("interval"),
        "categories": summary.get("categories") or {},
        "results": results,
        "other_runs": selectors.eval_run_list(
            tenant=request.tenant, suite_id=run.suite_id, excluding_run_id=run.pk
        ),
    }
    baseline_id = request.GET.get("baseline")
    if baseline_id:
        candidate, baseline, comparison = selectors.eval_comparison(
            tenant=request.tenant, candidate_run_id=run.pk, baseline_run_id=baseline_id
        )
        baseline_results = {
            result.case.key: result
            for result in selectors.eval_results(tenant=request.tenant, run_id=baseline.pk)
        }
        context |= {
            "baseline": baseline,
            "comparison": comparison_data(candidate, baseline, comparison),
            "rows": [
                {
                    "result": result,
                    "baseline": baseline_results.get(result.case.key),
                    "flip": (
                        "regressed"
                        if result.case.key in comparison.flips.regressed
                        else "fixed"
                        if result.case.key in comparison.flips.fixed
                        else ""
                    ),
                }
                for result in results
            ],
        }
    return render(request, "console/eval_run.html", context)
