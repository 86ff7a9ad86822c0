"""Reads of eval suites, cases, runs and results; tenant first."""

from apps.core.selectors import get_in_tenant
from apps.evaluation.models import EvalCase, EvalCaseResult, EvalRun, EvalSuite
from apps.tenants.models import Tenant
from workers.evaluation.compare import CaseValue, Comparison, compare_runs


def eval_suite_list(*, tenant: Tenant):
    return EvalSuite.objects.for_tenant(tenant).order_by("name")


def eval_suite_get(*, tenant: Tenant, suite_id) -> EvalSuite:
    return get_in_tenant(EvalSuite, tenant=tenant, pk=suite_id, code="eval_suite_not_found")


def eval_case_list(*, tenant: Tenant, suite_id):
    return EvalCase.objects.for_tenant(tenant).filter(suite_id=suite_id).order_by("key")


def eval_case_counts(*, tenant: Tenant, suite_id) -> dict[str, int]:
    """Cases of one of the tenant's suites per category."""
    from django.db.models import Count

    rows = (
        EvalCase.objects.for_tenant(tenant)
        .filter(suite_id=suite_id)
        .values("category")
        .annotate(count=Count("id"))
        .order_by("category")
    )
    return {row["category"]: row["count"] for row in rows}


def eval_run_list(*, tenant: Tenant, suite_id=None, version_id=None, excluding_run_id=None):
    runs = EvalRun.objects.for_tenant(tenant).select_related("suite", "model_version")
    if suite_id:
        runs = runs.filter(suite_id=suite_id)
    if version_id:
        runs = runs.filter(model_version_id=version_id)
    if excluding_run_id:
        runs = runs.exclude(pk=excluding_run_id)
    return runs.order_by("-created_at", "-id")


def eval_run_get(*, tenant: Tenant, run_id) -> EvalRun:
    return get_in_tenant(
        EvalRun.objects.select_related("suite", "model_version"),
        tenant=tenant,
        pk=run_id,
        code="eval_run_not_found",
    )


def eval_run_for_worker(*, run_id) -> EvalRun:
    """The run an eval worker executes, with its tenant, suite and version (the worker holds the claim; no
    tenant in hand yet). Raises EvalRun.DoesNotExist for a missing one."""
    return EvalRun.objects.select_related("tenant", "suite", "model_version").get(pk=run_id)


def eval_results(*, tenant: Tenant, run_id):
    return (
        EvalCaseResult.objects.for_tenant(tenant)
        .filter(run_id=run_id)
        .select_related("case")
        .order_by("case__key")
    )


def eval_run_statuses(*, tenant: Tenant, run_ids) -> dict[int, str]:
    return dict(EvalRun.objects.for_tenant(tenant).filter(pk__in=run_ids).values_list("pk", "status"))


def eval_run_case_values(*, tenant: Tenant, run_id) -> list[CaseValue]:
    """Per-case values of a run for comparison; a case that errored counts as failed with score 0."""
    return [
        CaseValue(key=key, category=category, score=score if score is not None else 0.0, passed=passed)
        for key, category, score, passed in eval_results(tenant=tenant, run_id=run_id).values_list(
            "case__key", "case__category", "score", "passed"
        )
    ]


def eval_comparison(
    *, tenant: Tenant, candidate_run_id, baseline_run_id
) -> tuple[EvalRun, EvalRun, Comparison]:
    """Candidate vs baseline over the cases both scored: metric differences with paired bootstrap intervals
    and the cases that flipped. Both runs must be of this tenant (404 otherwise)."""
    candidate = eval_run_get(tenant=tenant, run_id=candidate_run_id)
    baseline = eval_run_get(tenant=tenant, run_id=baseline_run_id)
    comparison = compare_runs(
        eval_run_case_values(tenant=tenant, run_id=candidate.pk),
        eval_run_case_values(tenant=tenant, run_id=baseline.pk),
    )
    return candidate, baseline, comparison
