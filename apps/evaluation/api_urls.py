from django.urls import path

from apps.evaluation.apis import (
    EvalBfclSuiteCreateApi,
    EvalCaseListApi,
    EvalComparisonApi,
    EvalRunDetailApi,
    EvalRunListApi,
    EvalSuiteListApi,
)

urlpatterns = [
    path("eval/suites/", EvalSuiteListApi.as_view(), name="eval-suite-list"),
    path("eval/suites/bfcl/", EvalBfclSuiteCreateApi.as_view(), name="eval-bfcl-suite-create"),
    path("eval/suites/<int:suite_id>/cases/", EvalCaseListApi.as_view(), name="eval-case-list"),
    path("eval/runs/", EvalRunListApi.as_view(), name="eval-run-list"),
    path("eval/runs/<int:run_id>/", EvalRunDetailApi.as_view(), name="eval-run-detail"),
    path("eval/compare/", EvalComparisonApi.as_view(), name="eval-compare"),
]
