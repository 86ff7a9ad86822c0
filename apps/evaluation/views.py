"""Console pages: suites with their cases and runs, a run's per-case results, and a run compared with a
baseline run (metric differences with bootstrap intervals, flipped cases)."""

from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from apps.console.access import console_page
from apps.console.pages import console_action
from apps.evaluation import selectors, services
from apps.evaluation.apis import comparison_data
from apps.tenants.permissions import Action, role_can
from apps.training.selectors import model_version_list


@console_page(Action.EVAL_VIEW)
def suite_list(request):
    return render(
        request,
        "console/eval_suites.html",
        {
            "suites": selectors.eval_suite_list(tenant=request.tenant),
            "runs": selectors.eval_run_list(tenant=request.tenant)[:50],
        },
    )


@console_page(Action.EVAL_VIEW)
def suite_detail(request, suite_id):
    suite = selectors.eval_suite_get(tenant=request.tenant, suite_id=suite_id)
    return render(
        request,
        "console/eval_suite.html",
        {
            "suite": suite,
            "cases": selectors.eval_case_list(tenant=request.tenant, suite_id=suite.pk),
            "runs": selectors.eval_run_list(tenant=request.tenant, suite_id=suite.pk)[:50],
            "versions": model_version_list(tenant=request.tenant),
            "can_run": role_can(request.membership.role, Action.EVAL_MANAGE),
        },
    )


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
    messages.success(request, f"Run {run.pk} queued on the eval workers.")
    return redirect("console:eval-run", run_id=run.pk)


@console_page(Action.EVAL_VIEW)
def run_detail(request, run_id):
    run = selectors.eval_run_get(tenant=request.tenant, run_id=run_id)
    results = list(selectors.eval_results(tenant=request.tenant, run_id=run.pk))
    context = {
        "run": run,
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
