"""BFCL's held-out split as an eval suite (apps/evaluation/bfcl.py), through the REST API, the management
command and the eval worker's own runner against a scripted gateway on loopback: the suite holds held-out
cases only, scored by BFCL's checker (a wrong answer scores 0 with the checker's reason, a malformed call is a
failed case, never a crash), per-category figures with bootstrap intervals in the run's summary, another
tenant can neither see nor run the suite, and the evolution policy's gate can name it."""

import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from apps.evaluation.models import EvalCase, EvalCaseResult, EvalRun, EvalSuite, RunStatus
from apps.loop.eval_runs import eval_run_execute
from apps.tenants.permissions import Role
from apps.training.models import VersionStatus
from apps.training.services import alias_move
from tests.evaluation.factories import EvalRunFactory
from tests.inference.factories import BackendFactory
from tests.network import scripted_http_server
from tests.releases.helpers import MODEL, SYSTEM, version_with_weights
from tests.training.factories import ModelVersionFactory
from workers.envs.bfcl import load_cases, split_of

SIMPLE = "simple_python_13"  # held-out: the area under y=x^2 from 1 to 3 (calculate_area_under_curve)
IRRELEVANT = "irrelevance_0"  # held-out: no offered function fits
MULTI_TURN = "multi_turn_base_50"  # held-out: one turn over VehicleControlAPI


def _create(client, **body):
    return client.post("/api/v1/eval/suites/bfcl/", body, format="json")


def _reply(calls=(), content=""):
    message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": f"call_{index}", "type": "function", "function": {"name": name, "arguments": arguments}}
            for index, (name, arguments) in enumerate(calls)
        ]
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
    }


@pytest.mark.django_db
def test_a_bfcl_suite_holds_held_out_cases_of_the_chosen_categories(tenant, api_client):
    client = api_client(["admin", "trajectories:read"])
    created = _create(client, name="bfcl", categories=["simple_python", "multi_turn_base"], per_category=2)
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["cases"] == {"simple_python": 2, "multi_turn_base": 2}
    listed = client.get(f"/api/v1/eval/suites/{body['id']}/cases/").json()["results"]
    expected = [case.case_id for case in load_cases("multi_turn_base", split="heldout")[:2]] + [
        case.case_id for case in load_cases("simple_python", split="heldout")[:2]
    ]
    assert sorted(row["key"] for row in listed) == sorted(expected)
    assert all(split_of(row["key"]) == "heldout" for row in listed)
    assert {row["scorer"] for row in listed} == {"bfcl"}
    assert {row["category"] for row in listed} == {"simple_python", "multi_turn_base"}
    first = next(row for row in listed if row["category"] == "simple_python")
    assert first["environment"]["bfcl"] == {
        "case_id": first["key"],
        "category": "simple_python",
        "split": "heldout",
        "turns": 1,
    }
    assert first["input_messages"][0]["role"] == "user"  # the question, for the pages


@pytest.mark.django_db
def test_bad_bfcl_suite_settings_are_refused_with_field_errors_and_nothing_is_created(tenant, api_client):
    client = api_client(["admin", "trajectories:read"])
    for body, field in (
        ({"categories": ["live_simple"]}, "categories"),  # reserved for an independent check
        ({"categories": ["no_such_category"]}, "categories"),
        ({"categories": ["simple_python"], "case_ids": ["simple_python_0"]}, "case_ids"),  # a train case
        ({"per_category": 0}, "per_category"),
        ({"max_tokens": 0}, "max_tokens"),
    ):
        refused = _create(client, name="bfcl", **body)
        assert refused.status_code == 400, (body, refused.content)
        assert field in refused.json()["error"]["fields"], refused.json()
    assert not EvalSuite.objects.filter(tenant=tenant).exists()
    assert not EvalCase.objects.filter(tenant=tenant).exists()
    # A BFCL case cannot be hand-made with the generic endpoint: it comes with its suite.
    suite = _create(client, name="bfcl", categories=["irrelevance"], per_category=1).json()
    refused = client.post(
        f"/api/v1/eval/suites/{suite['id']}/cases/",
        {"key": "mine", "input_messages": [{"role": "user", "content": "hi"}], "scorer": "bfcl"},
        format="json",
    )
    assert refused.status_code == 400
    assert "scorer" in refused.json()["error"]["fields"]
    assert EvalCase.objects.filter(tenant=tenant).count() == 1


@pytest.mark.django_db
def test_the_management_command_creates_the_suite_and_refuses_live_categories(tenant, capsys):
    call_command("bfclsuite", tenant.slug, "--categories", "irrelevance", "parallel", "--per-category", "3")
    out = capsys.readouterr().out
    assert "6 cases (irrelevance 3, parallel 3)" in out
    suite = EvalSuite.objects.get(tenant=tenant, name="bfcl-heldout")
    assert suite.cases.count() == 6
    with pytest.raises(CommandError, match="reserved"):
        call_command("bfclsuite", tenant.slug, "--name", "live", "--categories", "live_simple")
    assert not EvalSuite.objects.filter(tenant=tenant, name="live").exists()


@pytest.mark.django_db
def test_another_tenant_can_neither_see_nor_run_the_suite(
    tenant, other_tenant, api_client, member, django_capture_on_commit_callbacks
):
    suite = _create(
        api_client(["admin", "trajectories:read"]), name="bfcl", categories=["irrelevance"], per_category=2
    ).json()
    theirs = api_client(["admin", "trajectories:read"], of=other_tenant)
    their_version = ModelVersionFactory(tenant=other_tenant)
    assert theirs.get(f"/api/v1/eval/suites/{suite['id']}/cases/").status_code == 404
    assert suite["id"] not in [row["id"] for row in theirs.get("/api/v1/eval/suites/").json()["results"]]
    with django_capture_on_commit_callbacks(execute=False) as enqueued:
        refused = theirs.post(
            "/api/v1/eval/runs/",
            {"suite_id": suite["id"], "version_id": their_version.pk},
            format="json",
        )
    assert refused.status_code == 404
    assert enqueued == []
    assert not EvalRun.objects.exists()
    # nor through the console
    page = api_client(user=member(Role.ADMIN, of=other_tenant))
    assert page.get(f"/evaluation/suites/{suite['id']}/").status_code == 404


# ---- the eval worker's runner against a scripted gateway ---------------------------------------------------


@pytest.fixture
def production(tenant, tmp_path):
    version = version_with_weights(tenant, tmp_path / "v0", status=VersionStatus.PRODUCTION)
    alias_move(tenant=tenant, actor=SYSTEM, name=MODEL, alias="production", version=version)
    return version


def _run_against(tenant, production, settings, suite_id, reply):
    run = EvalRunFactory(suite=EvalSuite.objects.get(pk=suite_id), model_version=production)
    routes = {("POST", "/v1/chat/completions"): (200, {}, reply)}
    with scripted_http_server(routes) as (url, received):
        settings.AREAL_GATEWAY_URL = url
        backend = BackendFactory(tenant=tenant, base_url=url, served_model=MODEL, model_version="0")
        summary = eval_run_execute(run_id=run.pk)
        backend.delete()
    return run, summary, received


def _results(run):
    return {
        result.case.key: result for result in EvalCaseResult.objects.filter(run=run).select_related("case")
    }


@pytest.mark.django_db(transaction=True)  # as the worker runs: no enclosing transaction
def test_a_wrong_call_scores_zero_with_the_checkers_reason_and_the_summary_has_per_category_intervals(
    tenant, production, settings, api_client
):
    client = api_client(["admin", "trajectories:read"])
    suite = _create(client, name="bfcl", case_ids=[SIMPLE, IRRELEVANT]).json()
    assert suite["cases"] == {"simple_python": 1, "irrelevance": 1}
    # The right function with a wrong interval: BFCL's AST checker says which value is wrong.
    wrong = _reply([("calculate_area_under_curve", json.dumps({"function": "x**2", "interval": [1.0, 4.0]}))])
    run, summary, received = _run_against(tenant, production, settings, suite["id"], wrong)
    assert received == [("POST", "/v1/chat/completions")] * 2
    assert summary["status"] == RunStatus.SUCCEEDED
    results = _results(run)
    simple, irrelevant = results[SIMPLE], results[IRRELEVANT]
    assert (simple.score, simple.passed, simple.error) == (0.0, False, "")
    assert "interval" in simple.label
    assert simple.details["error_type"].startswith("value_error")
    assert simple.tool_calls[0]["name"] == "calculate_area_under_curve"
    assert (irrelevant.score, irrelevant.passed) == (0.0, False)  # it called something: irrelevance lost
    assert irrelevant.details["error_type"] == "irrelevance_error:called"

    detail = client.get(f"/api/v1/eval/runs/{run.pk}/").json()
    categories = detail["summary"]["categories"]
    assert set(categories) == {"simple_python", "irrelevance"}
    for figures in categories.values():
        assert figures["cases"] == 1
        assert figures["pass_rate"] == 0.0
        assert figures["low"] <= figures["pass_rate"] <= figures["high"]
    assert detail["summary"]["score"] == 0.0
    reasons = {row["case"]: row for row in detail["results"]}
    assert reasons[SIMPLE]["details"]["reason"] == simple.details["reason"]

    # No call at all wins irrelevance and loses simple_python: per-category figures tell them apart.
    suite_two = _create(client, name="bfcl-2", case_ids=[SIMPLE, IRRELEVANT]).json()
    run_two, summary_two, _ = _run_against(
        tenant, production, settings, suite_two["id"], _reply(content="I cannot help with that.")
    )
    assert summary_two["categories"]["irrelevance"]["pass_rate"] == 1.0
    assert summary_two["categories"]["simple_python"]["pass_rate"] == 0.0
    assert _results(run_two)[SIMPLE].details["error_type"] == "no_call"
    assert summary_two["score"] == 0.5
    low, high = summary_two["interval"]["low"], summary_two["interval"]["high"]
    assert 0.0 <= low <= 0.5 <= high <= 1.0


@pytest.mark.django_db(transaction=True)
def test_a_malformed_call_from_the_model_is_a_failed_case_never_a_crash(
    tenant, production, settings, api_client
):
    client = api_client(["admin", "trajectories:read"])
    suite = _create(client, name="bfcl", case_ids=[SIMPLE, MULTI_TURN], max_steps_per_turn=2).json()
    malformed = _reply([("calculate_area_under_curve", "{not json"), ("no_such_function", "{}")])
    run, summary, received = _run_against(tenant, production, settings, suite["id"], malformed)
    assert summary["status"] == RunStatus.SUCCEEDED
    assert summary["errors"] == 0  # judged by the checker: failed cases, not errors
    results = _results(run)
    simple = results[SIMPLE]
    assert (simple.score, simple.passed) == (0.0, False)
    assert simple.details["error_type"] in {"malformed_arguments", "unknown_function"}
    assert simple.label
    # The multi-turn case: each malformed call answered with its reason by the local executor, the model
    # called again until the step limit; the case failed with its reason, the run went on.
    multi = results[MULTI_TURN]
    assert (multi.score, multi.passed) == (0.0, False)
    assert multi.details["steps"] == 2
    assert multi.details["turns"] == [False]
    assert multi.details["error_type"] in {
        "malformed_arguments",
        "unknown_function",
        "multi_turn:force_terminated",
    }
    assert len(received) == 1 + 2


@pytest.mark.django_db(transaction=True)
def test_the_evolution_policys_gate_runs_the_bfcl_suite_and_passes_the_better_version(
    tenant, settings, api_client
):
    """A policy names the BFCL suite as its gate: the evaluate decision runs it on the learner's version and
    on production, and the checker's accuracy decides (here the candidate calls nothing: it wins
    irrelevance; production makes a wrong call: it loses both)."""
    from apps.evolution.models import Decision, DecisionStatus
    from apps.loop.control import evolution_tick
    from apps.training.online import online_run_record_step, online_run_start
    from tests.evolution.factories import AutoPolicyFactory
    from tests.evolution.helpers import CALM, candidate
    from tests.evolution.helpers import production as production_of

    suite = _create(
        api_client(["admin", "trajectories:read"]), name="bfcl", case_ids=[SIMPLE, IRRELEVANT]
    ).json()
    policy = AutoPolicyFactory(tenant=tenant, gate={"suite_id": suite["id"], "min_gain": 0.0})
    base = production_of(tenant, policy)
    learner = online_run_start(tenant=tenant, actor=SYSTEM, base_version=base, publish_to_backends=False)
    newest = base
    for _ in range(2):  # the policy evaluates every second version
        newest = candidate(tenant, newest)
        online_run_record_step(run_id=learner.pk, version=newest)
    evolution_tick(tenant=tenant, policy=policy, signals=CALM)
    decision = Decision.objects.get(policy=policy, kind="evaluate")
    runs = {run.model_version_id: run for run in EvalRun.objects.filter(pk__in=decision.started["eval_runs"])}
    assert set(runs) == {newest.pk, base.pk}
    for version, reply in (
        (newest, _reply(content="None of these functions fits.")),
        (
            base,
            _reply([("calculate_area_under_curve", json.dumps({"function": "x**3", "interval": [1, 3]}))]),
        ),
    ):
        with scripted_http_server({("POST", "/v1/chat/completions"): (200, {}, reply)}) as (url, _):
            settings.AREAL_GATEWAY_URL = url
            backend = BackendFactory(
                tenant=tenant, base_url=url, served_model=policy.model, model_version=str(version.number)
            )
            assert eval_run_execute(run_id=runs[version.pk].pk)["status"] == RunStatus.SUCCEEDED
            backend.delete()
    evolution_tick(tenant=tenant, policy=policy, signals=CALM)
    decision.refresh_from_db()
    assert decision.status == DecisionStatus.SUCCEEDED, decision.outcome
    assert (decision.evidence["gate_score"], decision.evidence["best_production_score"]) == (0.5, 0.0)
    assert decision.evidence["passed"] is True
    assert Decision.objects.get(policy=policy, kind="release").parent == decision


def test_the_bootstrap_interval_of_an_accuracy():
    from workers.evaluation.compare import bootstrap_mean

    values = [1.0] * 30 + [0.0] * 70
    interval = bootstrap_mean(values, seed=3)
    assert interval == bootstrap_mean(values, seed=3)  # deterministic for a seed
    assert interval.mean == 0.3
    assert 0.18 < interval.low < 0.3 < interval.high < 0.42
    assert interval.samples == 100
    certain = bootstrap_mean([1.0] * 5)
    assert (certain.low, certain.high) == (1.0, 1.0)
    assert bootstrap_mean([]) is None
