"""LLM-judge evaluators through the REST API and the console: created and edited with validation (each
configuration problem a field error, nothing stored), a used version's meaning fixed, runs listed with their
failures, another tenant's evaluators and models invisible. The runner hands judges to their own task."""

import uuid
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.rewards.evaluator_runs import evaluators_run
from apps.rewards.models import Evaluator, EvaluatorRun, Reward
from apps.rewards.services import evaluator_create, evaluator_reward_store
from apps.tenants.permissions import Role
from apps.trajectories.models import Purpose
from tests.inference.factories import BackendFactory
from tests.qualification.conftest import eager_tasks  # noqa: F401  (fixture)
from tests.releases.helpers import register_versions
from tests.rewards.factories import SYSTEM
from tests.trajectories.factories import TrajectoryFactory

pytestmark = pytest.mark.django_db

RUBRIC = "Task: {task}\nAnswer: {final_answer}\nTools: {tool_calls}"
JUDGE = {
    "rubric": RUBRIC,
    "model": "grader",
    "version": "2024-06",
    "score": {"min": 0, "max": 10},
    "max_tokens": 128,
}


@pytest.fixture
def grader(tenant):
    """The tenant's backend of an external judge model, `grader` at version 2024-06 (never called here)."""
    return BackendFactory(tenant=tenant, name="grader", served_model="grader", model_version="2024-06")


def _create(client, config, **fields):
    return client.post(
        "/api/v1/evaluators/",
        {"name": "helpfulness", "kind": "llm_judge", "config": config, **fields},
        format="json",
    )


def test_an_llm_judge_is_created_edited_and_fixed_once_used(api_client, member, tenant, grader):
    operator = api_client(user=member(Role.OPERATOR))
    created = _create(operator, JUDGE)
    assert created.status_code == 201, created.content
    evaluator_id = created.json()["id"]
    assert created.json()["config"] == JUDGE
    assert operator.get(f"/api/v1/evaluators/{evaluator_id}/").json()["kind"] == "llm_judge"

    edited = operator.patch(
        f"/api/v1/evaluators/{evaluator_id}/",
        {"config": {**JUDGE, "rubric": "Be strict. " + RUBRIC}},
        format="json",
    )
    assert edited.status_code == 200, edited.content
    assert edited.json()["config"]["rubric"].startswith("Be strict.")
    update = AuditEvent.objects.get(tenant=tenant, verb="evaluator.update")
    assert update.data["before"]["config"]["rubric"] == RUBRIC

    bad = operator.patch(
        f"/api/v1/evaluators/{evaluator_id}/",
        {"config": {**JUDGE, "rubric": "Grade {answer}"}},
        format="json",
    )
    assert bad.status_code == 400
    assert "unknown placeholders: {answer}" in bad.json()["error"]["fields"]["config.rubric"][0]
    renamed = operator.patch(f"/api/v1/evaluators/{evaluator_id}/", {"name": "x"}, format="json")
    assert renamed.status_code == 200  # not an editable field: ignored by the input serializer
    evaluator = Evaluator.objects.get(pk=evaluator_id)
    assert (evaluator.name, evaluator.config["rubric"]) == ("helpfulness", "Be strict. " + RUBRIC)

    # Once the version has stored a reward, its configuration is fixed; enabling and agent stay editable.
    evaluator_reward_store(evaluator=evaluator, trajectory=TrajectoryFactory(tenant=tenant), value=7.0)
    used = operator.patch(
        f"/api/v1/evaluators/{evaluator_id}/",
        {"config": {**evaluator.config, "max_tokens": 64}},
        format="json",
    )
    assert used.status_code == 409
    assert used.json()["error"]["code"] == "evaluator_version_used"
    same = operator.patch(  # the same judge written with its defaults spelled out is no change
        f"/api/v1/evaluators/{evaluator_id}/",
        {"config": {**evaluator.config, "timeout_s": 30.0, "retries": 2}, "enabled": False},
        format="json",
    )
    assert same.status_code == 200, same.content
    stored = Evaluator.objects.get(pk=evaluator_id)
    assert (stored.enabled, stored.config) == (False, evaluator.config)
    denied = api_client(user=member(Role.ANNOTATOR)).patch(
        f"/api/v1/evaluators/{evaluator_id}/", {"enabled": True}, format="json"
    )
    assert denied.status_code == 403
    assert Evaluator.objects.get(pk=evaluator_id).enabled is False


@pytest.mark.parametrize(
    ("config", "field", "problem"),
    [
        ({**JUDGE, "rubric": "Grade {answer} for {task}"}, "config.rubric", "unknown placeholders: {answer}"),
        ({**JUDGE, "rubric": ""}, "config.rubric", "required"),
        ({**JUDGE, "score": {"min": 10, "max": 1}}, "config.score", "min (10) must be below max (1)"),
        ({**JUDGE, "score": {"min": 0}}, "config.score", "finite numbers"),
        ({k: v for k, v in JUDGE.items() if k != "score"}, "config.score", "score range, verdicts, or both"),
        ({k: v for k, v in JUDGE.items() if k != "model"}, "config.model", "required"),
        ({k: v for k, v in JUDGE.items() if k != "version"}, "config.version", "pinned"),
        ({**JUDGE, "model": "nobody-serves-this"}, "config.model", "routes no model 'nobody-serves-this'"),
        (
            {**JUDGE, "version": "2023-01"},
            "config.version",
            "no backend serves 'grader' at version '2023-01'",
        ),
        ({**JUDGE, "temperature": 0.7}, "config.temperature", "temperature 0"),
        ({**JUDGE, "verdicts": {"pass": 1}}, "config.verdicts", "at least two labels"),
        ({**JUDGE, "retries": 50}, "config.retries", "from 0 to 5"),
    ],
)
def test_judge_configuration_problems_are_field_errors(api_client, tenant, grader, config, field, problem):
    response = _create(api_client(), config)
    assert response.status_code == 400, response.content
    assert problem in response.json()["error"]["fields"][field][0]
    assert not Evaluator.objects.filter(tenant=tenant).exists()


def test_a_registry_model_is_pinned_to_one_of_its_versions(api_client, tenant):
    register_versions(tenant, name="judge-llm")  # versions 0 and 1
    client = api_client()
    missing = _create(client, {**JUDGE, "model": "judge-llm", "version": "7"})
    assert missing.status_code == 400
    assert missing.json()["error"]["fields"]["config.version"] == [
        "no version '7' of 'judge-llm' in the registry (it has 0, 1)"
    ]
    assert _create(client, {**JUDGE, "model": "judge-llm", "version": 1}).status_code == 201


def test_judges_and_their_models_stay_within_the_tenant(api_client, member, tenant, other_tenant, grader):
    BackendFactory(tenant=other_tenant, name="theirs", served_model="their-grader", model_version="1")
    theirs = evaluator_create(
        tenant=other_tenant,
        actor=SYSTEM,
        name="their-judge",
        kind="llm_judge",
        config={**JUDGE, "model": "their-grader", "version": "1"},
    )
    their_run = EvaluatorRun.objects.create(
        tenant=other_tenant,
        evaluator=theirs,
        trajectory=TrajectoryFactory(tenant=other_tenant),
        status="failed",
        raw_answer="their secret answer",
    )
    operator = api_client(user=member(Role.OPERATOR))
    # Another tenant's judge model is not one this tenant's gateway routes.
    borrowed = _create(operator, {**JUDGE, "model": "their-grader", "version": "1"})
    assert borrowed.status_code == 400
    assert "routes no model 'their-grader'" in borrowed.json()["error"]["fields"]["config.model"][0]
    for response in (
        operator.get(f"/api/v1/evaluators/{theirs.pk}/"),
        operator.patch(f"/api/v1/evaluators/{theirs.pk}/", {"enabled": False}, format="json"),
        operator.get(f"/api/v1/evaluators/{theirs.pk}/runs/"),
    ):
        assert response.status_code == 404
        assert b"their" not in response.content
    theirs.refresh_from_db()
    assert theirs.enabled is True
    mine = evaluator_create(tenant=tenant, actor=SYSTEM, name="mine", kind="llm_judge", config=JUDGE)
    failed = EvaluatorRun.objects.create(
        tenant=tenant,
        evaluator=mine,
        trajectory=TrajectoryFactory(tenant=tenant),
        status="failed",
        error_code="answer_unparseable",
        error="no score in the answer",
        raw_answer="I refuse.",
    )
    EvaluatorRun.objects.create(
        tenant=tenant, evaluator=mine, trajectory=TrajectoryFactory(tenant=tenant), status="succeeded"
    )
    runs = operator.get(f"/api/v1/evaluators/{mine.pk}/runs/", {"status": "failed"}).json()["results"]
    assert [(run["id"], run["error_code"], run["raw_answer"]) for run in runs] == [
        (failed.pk, "answer_unparseable", "I refuse.")
    ]
    assert their_run.pk not in {
        run["id"] for run in operator.get(f"/api/v1/evaluators/{mine.pk}/runs/").json()["results"]
    }


def test_the_runner_hands_judges_to_their_own_task_and_never_judges_eval_traffic(tenant, grader, monkeypatch):
    from apps.rewards import tasks

    queued = []
    monkeypatch.setattr(tasks.run_judge, "delay", lambda *args: queued.append(args))
    judge = evaluator_create(tenant=tenant, actor=SYSTEM, name="judge", kind="llm_judge", config=JUDGE)
    evaluator_create(tenant=tenant, actor=SYSTEM, name="any", kind="regex", config={"pattern": "."})
    production = TrajectoryFactory(tenant=tenant)
    evaluation = TrajectoryFactory(tenant=tenant, purpose=Purpose.EVAL)
    assert evaluators_run(trajectory_id=str(production.pk))["results"] == {
        "any@1": 1.0,
        "judge@1": "queued: rewards.run_judge",
    }
    assert evaluators_run(trajectory_id=str(evaluation.pk))["results"]["judge@1"].startswith("skipped")
    assert queued == [(str(production.pk), judge.pk)]
    assert Reward.objects.filter(trajectory=evaluation, created_by="judge@1").count() == 0


def _console(member, role):
    client = Client()
    client.force_login(member(role))
    return client


FORM = {
    "name": "helpfulness",
    "version": "1",
    "kind": "llm_judge",
    "enabled": "on",
    "rubric": RUBRIC,
    "judge_model": "grader",
    "judge_version": "2024-06",
    "score_min": "0",
    "score_max": "10",
    "clamp": "on",
    "max_tokens": "128",
    "timeout_s": "30",
    "retries": "2",
}


def test_the_console_registers_and_edits_a_judge_with_errors_beside_their_fields(
    member, tenant, other_tenant, grader
):
    operator = _console(member, Role.OPERATOR)
    assert ">Evaluators</a>" in operator.get("/").content.decode()
    bad = operator.post(
        "/evaluators/", {**FORM, "rubric": "Grade {answer}", "score_min": "10", "score_max": "1"}
    )
    assert bad.status_code == 400
    page = bad.content.decode()
    assert 'data-field="rubric">unknown placeholders: {answer}' in page
    assert 'data-field="score_min">min (10.0) must be below max (1.0)' in page
    unrouted = operator.post("/evaluators/", {**FORM, "judge_model": "nobody"})
    assert unrouted.status_code == 400
    assert 'data-field="judge_model">this tenant&#x27;s gateway routes no model' in unrouted.content.decode()
    assert not Evaluator.objects.filter(tenant=tenant).exists()

    created = operator.post("/evaluators/", {**FORM, "verdicts": "pass=1, fail=0"})
    assert created.status_code == 302
    evaluator = Evaluator.objects.get(tenant=tenant, name="helpfulness")
    assert evaluator.config["verdicts"] == {"pass": 1.0, "fail": 0.0}
    assert evaluator.config["score"] == {"min": 0.0, "max": 10.0, "clamp": True, "normalize": False}
    detail = operator.get(f"/evaluators/{evaluator.pk}/")
    assert detail.status_code == 200
    assert "<code>grader</code> pinned to version 2024-06" in detail.content.decode()
    assert 'value="pass=1, fail=0"' in detail.content.decode()

    edited = operator.post(f"/evaluators/{evaluator.pk}/", {**FORM, "max_tokens": "64", "name": "renamed"})
    assert edited.status_code == 302
    evaluator.refresh_from_db()
    assert (evaluator.name, evaluator.config["max_tokens"], "verdicts" in evaluator.config) == (
        "helpfulness",
        64,
        False,
    )
    viewer = _console(member, Role.VIEWER)
    assert viewer.get(f"/evaluators/{evaluator.pk}/").status_code == 200
    assert viewer.post(f"/evaluators/{evaluator.pk}/", {**FORM, "max_tokens": "32"}).status_code == 403
    assert Evaluator.objects.get(pk=evaluator.pk).config["max_tokens"] == 64
    BackendFactory(tenant=other_tenant, name="g", served_model="grader", model_version="2024-06")
    theirs = evaluator_create(
        tenant=other_tenant, actor=SYSTEM, name="theirs", kind="llm_judge", config=JUDGE
    )
    assert operator.get(f"/evaluators/{theirs.pk}/").status_code == 404
    assert operator.post(f"/evaluators/{theirs.pk}/", FORM).status_code == 404
    assert Evaluator.objects.get(pk=theirs.pk).config == JUDGE
    assert "theirs" not in operator.get("/evaluators/").content.decode()


def test_a_failed_judge_run_is_run_again_on_request_and_a_held_one_is_left_alone(
    api_client,
    tenant,
    grader,
    monkeypatch,
    django_capture_on_commit_callbacks,
    eager_tasks,  # noqa: F811
):
    from apps.loop import judging

    answers = ["I cannot say.", '{"score": 9, "reason": "clear"}']
    calls = []

    def judge_call(*, tenant, config, session_id, messages, sleep):
        calls.append(session_id)
        return judging.JudgeAnswer(
            text=answers[len(calls) - 1], step_id=str(uuid.uuid4()), finish_reason="stop", attempts=1
        )

    monkeypatch.setattr(judging, "judge_call", judge_call)
    evaluator = evaluator_create(tenant=tenant, actor=SYSTEM, name="judge", kind="llm_judge", config=JUDGE)
    trajectory = TrajectoryFactory(tenant=tenant)
    client = api_client(scopes=["admin", "trajectories:read"])

    def run():
        with django_capture_on_commit_callbacks(execute=True):
            response = client.post(
                f"/api/v1/evaluators/{evaluator.pk}/run/",
                {"trajectory_id": str(trajectory.pk)},
                format="json",
            )
        assert response.status_code == 202
        return EvaluatorRun.objects.get(evaluator=evaluator, trajectory=trajectory)

    failed = run()
    assert (failed.status, failed.error_code, failed.raw_answer) == (
        "failed",
        "answer_unparseable",
        "I cannot say.",
    )
    assert not Reward.objects.filter(trajectory=trajectory).exists()
    succeeded = run()  # a failure is run again
    assert (succeeded.status, succeeded.attempts, succeeded.error_code, succeeded.raw_answer) == (
        "succeeded",
        2,
        "",
        "",
    )
    listed = client.get("/api/v1/rewards/", {"source": "evaluator", "trajectory_id": str(trajectory.pk)})
    [reward] = listed.json()["results"]
    assert (reward["value"], reward["created_by"]) == (9.0, "judge@1")
    assert reward["evidence"]["judge_step_id"] == str(succeeded.judge_step_id)
    assert reward["evidence"]["judge_session_id"] == f"judge-{evaluator.pk}-{trajectory.pk}"
    run()  # a success is final
    assert len(calls) == 2

    other = TrajectoryFactory(tenant=tenant)
    EvaluatorRun.objects.create(
        tenant=tenant, evaluator=evaluator, trajectory=other, started_at=timezone.now()
    )
    assert judging.judge_run(evaluator_id=evaluator.pk, trajectory_id=str(other.pk)).status == "running"
    assert len(calls) == 2  # another worker holds it
    EvaluatorRun.objects.filter(trajectory=other).update(started_at=timezone.now() - timedelta(hours=1))
    answers.append('{"score": 3}')
    taken_over = judging.judge_run(evaluator_id=evaluator.pk, trajectory_id=str(other.pk))
    assert (taken_over.status, len(calls)) == ("succeeded", 3)  # a killed worker's claim goes stale
