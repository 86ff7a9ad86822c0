"""An eval case's tenant patterns (a `regex` scorer, a `refusal` scorer's `forbidden`) run as tenant PII
patterns do: one that backtracks on the model's output is stopped, the case records a scorer error saying
so, and the run finishes with the other cases scored. The gateway is a scripted stand-in on loopback; the
runner is the eval worker's own function."""

import time

import pytest

from apps.evaluation.models import EvalCaseResult, RunStatus
from apps.loop.eval_runs import eval_run_execute
from apps.training.models import VersionStatus
from apps.training.services import alias_move
from areal_web.celery import app
from tests.evaluation.factories import EvalRunFactory, EvalSuiteFactory
from tests.inference.factories import BackendFactory
from tests.network import scripted_http_server
from tests.releases.helpers import MODEL, SYSTEM, version_with_weights

pytestmark = pytest.mark.django_db(transaction=True)  # as the worker runs: no enclosing transaction
OUTPUT = "a" * 64 + "!"
ROUTES = {
    ("POST", "/v1/chat/completions"): (
        200,
        {},
        {"choices": [{"message": {"role": "assistant", "content": OUTPUT}}]},
    )
}
CASES = {
    "slow-regex": ("regex", {"pattern": "(a|aa)+$"}),
    "slow-forbidden": ("refusal", {"patterns": ["!"], "forbidden": ["(a|aa)+$"]}),
    "nested": ("regex", {"pattern": "(a+)+$"}),  # hangs `re`; the bounded engine answers at once
    "fine": ("regex", {"pattern": "a+!$"}),
}


def test_backtracking_scorer_patterns_are_stopped_and_the_run_finishes(
    tenant, tmp_path, settings, api_client
):
    client = api_client(["admin", "trajectories:read"])
    production = version_with_weights(tenant, tmp_path / "v0", status=VersionStatus.PRODUCTION)
    alias_move(tenant=tenant, actor=SYSTEM, name=MODEL, alias="production", version=production)
    suite = EvalSuiteFactory(tenant=tenant)
    for key, (scorer, config) in CASES.items():
        created = client.post(
            f"/api/v1/eval/suites/{suite.pk}/cases/",
            {
                "key": key,
                "scorer": scorer,
                "scorer_config": config,
                "input_messages": [{"role": "user", "content": "say a"}],
            },
            format="json",
        )
        assert created.status_code == 201, created.content
    run = EvalRunFactory(suite=suite, model_version=production)

    with scripted_http_server(ROUTES) as (url, _):
        settings.AREAL_GATEWAY_URL = url
        BackendFactory(tenant=tenant, name="slot-a", base_url=url, served_model=MODEL, model_version="0")
        started = time.monotonic()
        summary = eval_run_execute(run_id=run.pk)
        seconds = time.monotonic() - started

    assert seconds < 30
    assert summary["status"] == RunStatus.SUCCEEDED
    results = {result.case.key: result for result in EvalCaseResult.objects.filter(run=run)}
    for key in ("slow-regex", "slow-forbidden"):
        assert (results[key].score, results[key].passed) == (None, False)
        assert results[key].error.startswith("scorer: the pattern")
        assert "ran longer than 1 s on th" in results[key].error
        assert "was stopped (it backtracks on this text" in results[key].error
    assert (results["nested"].score, results["nested"].error) == (0.0, "")
    assert (results["fine"].score, results["fine"].passed) == (1.0, True)


def test_a_scorer_pattern_too_large_to_compile_is_refused_when_the_case_is_saved(tenant, api_client):
    client = api_client(["admin", "trajectories:read"])
    suite = EvalSuiteFactory(tenant=tenant)
    for scorer, config in (
        ("regex", {"pattern": "(?:a{1000}){1000}"}),
        ("refusal", {"forbidden": ["(?:a{1000}){1000}"]}),
    ):
        refused = client.post(
            f"/api/v1/eval/suites/{suite.pk}/cases/",
            {
                "key": scorer,
                "scorer": scorer,
                "scorer_config": config,
                "input_messages": [{"role": "user", "content": "x"}],
            },
            format="json",
        )
        assert refused.status_code == 400
        assert "too large" in str(refused.json()["error"]["fields"]["scorer_config"])
    assert not suite.cases.exists()


def test_the_eval_task_has_time_limits():
    from apps.evaluation.tasks import execute_eval_run

    task = app.tasks[execute_eval_run.name]
    assert 0 < task.soft_time_limit < task.time_limit
