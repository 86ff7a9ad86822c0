"""A BFCL suite run by the eval worker's runner through the real gateway and the embedded inference server
(a long-context copy of the default model: a multi-turn case's tools exceed 1,024 positions): every case is
one eval trajectory pinned to the version under test, scored by BFCL's checker, stored with its reason, and the
run's summary shows per-category accuracy with bootstrap intervals in REST and on the console's run page. The
tiny model mostly answers wrong: what is asserted is the behaviour, not accuracy."""

import pytest

from apps.evaluation.models import EvalCaseResult, EvalRun, RunStatus
from apps.inference.models import BackendKind, BackendState
from apps.loop.eval_runs import eval_run_execute
from apps.tenants.permissions import Role
from apps.training.models import VersionStatus
from apps.training.services import model_version_register
from apps.trajectories.models import Purpose, Step, Trajectory
from tests.gateway.conftest import MODEL, gateway  # noqa: F401  (fixtures)
from tests.gateway.helpers import drain
from tests.inference.factories import BackendFactory
from tests.releases.helpers import SYSTEM
from tests.workers.envs.test_bfcl_agent import (  # noqa: F401  (fixtures)
    default_model_dir,
    long_context_backend_url,
    long_context_model_dir,
)
from workers.envs.bfcl import CaseRun, ToolCall, load_cases, score_run
from workers.envs.bfcl import Step as BfclStep
from workers.inference.modelgen import tokenizer_fingerprint

pytestmark = pytest.mark.django_db(transaction=True)  # as the worker runs: no enclosing transaction

CASE_IDS = ("simple_python_13", "irrelevance_0", "multi_turn_base_50")  # held-out; the last: one turn


def test_a_bfcl_suite_runs_through_the_gateway_scored_by_the_checker_with_per_category_figures(
    gateway,  # noqa: F811
    long_context_model_dir,  # noqa: F811
    long_context_backend_url,  # noqa: F811
    tenant,
    api_client,
    member,
    settings,
):
    url, application = gateway
    settings.AREAL_GATEWAY_URL = url
    version = model_version_register(
        tenant=tenant,
        actor=SYSTEM,
        name=MODEL,
        checkpoint_path=str(long_context_model_dir),
        tokenizer_hash=tokenizer_fingerprint(long_context_model_dir),
        status=VersionStatus.CANDIDATE,
    )
    BackendFactory(
        tenant=tenant,
        name="embedded-long",
        base_url=long_context_backend_url,
        kind=BackendKind.EMBEDDED,
        served_model=MODEL,
        model_version=str(version.number),
        state=BackendState.UP,
    )
    client = api_client(["admin", "trajectories:read"])
    suite = client.post(
        "/api/v1/eval/suites/bfcl/",
        {"name": "bfcl", "case_ids": list(CASE_IDS), "max_tokens": 16, "max_steps_per_turn": 2},
        format="json",
    ).json()
    started = client.post(
        "/api/v1/eval/runs/", {"suite_id": suite["id"], "version_id": version.pk}, format="json"
    )
    assert started.status_code == 202, started.content
    run_id = started.json()["id"]

    summary = eval_run_execute(run_id=run_id)  # what the eval worker runs
    drain(application)

    assert summary["status"] == RunStatus.SUCCEEDED, summary
    results = {r.case.key: r for r in EvalCaseResult.objects.filter(run_id=run_id).select_related("case")}
    assert set(results) == set(CASE_IDS)
    for case_id, result in results.items():
        assert result.error == "", (case_id, result.error)  # the gateway answered: the checker judged it
        assert result.score in {0.0, 1.0}
        assert result.passed is (result.score == 1.0)
        assert result.label  # "ok", or the checker's reason
        assert result.details["bfcl_case"] == case_id
        if not result.passed:
            assert result.details["error_type"], result.details
        # one eval trajectory per case, pinned to the version under test, never production traffic
        trajectory = Trajectory.objects.get(tenant=tenant, session_id=result.session_id)
        assert trajectory.purpose == Purpose.EVAL
        assert trajectory.task_id == case_id
        assert set(Step.objects.filter(trajectory=trajectory).values_list("model_version", flat=True)) == {
            str(version.number)
        }
    multi = results["multi_turn_base_50"]
    assert len(multi.details["turns"]) == 1
    assert 1 <= multi.details["steps"] <= 2
    assert Step.objects.filter(trajectory__session_id=multi.session_id).count() == multi.details["steps"]

    # The stored verdict is the checker's: scoring the recorded calls again gives the same answer.
    (case,) = [case for case in load_cases("simple_python") if case.case_id == "simple_python_13"]
    simple = results["simple_python_13"]
    calls = tuple(ToolCall(call["name"], call["arguments"]) for call in simple.tool_calls)
    rescored = score_run(
        CaseRun(
            case=case,
            session_id=simple.session_id,
            transcript=(),
            steps=(BfclStep(turn=0, completion_id="x", content=simple.output_text, calls=calls),),
            finished_turns=1,
        )
    )
    assert (rescored.value, rescored.reason[:300]) == (simple.score, simple.label)

    detail = client.get(f"/api/v1/eval/runs/{run_id}/").json()
    categories = detail["summary"]["categories"]
    assert set(categories) == {"simple_python", "irrelevance", "multi_turn_base"}
    for name, figures in categories.items():
        assert figures["cases"] == 1
        assert figures["pass_rate"] == results[next(c for c in CASE_IDS if c.startswith(name))].score
        assert 0.0 <= figures["low"] <= figures["pass_rate"] <= figures["high"] <= 1.0
    assert (
        detail["summary"]["interval"]["low"]
        <= detail["summary"]["score"]
        <= detail["summary"]["interval"]["high"]
    )
    assert {row["case"]: row["label"] for row in detail["results"]} == {
        k: r.label for k, r in results.items()
    }

    page = api_client(user=member(Role.VIEWER)).get(f"/evaluation/runs/{run_id}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="categories"' in html
    for name in categories:
        assert f'data-category="{name}"' in html
    assert EvalRun.objects.get(pk=run_id).summary == detail["summary"]
