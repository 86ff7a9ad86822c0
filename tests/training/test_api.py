"""The training REST API: jobs (create with validation and an enqueue on commit, list, detail, cancel),
versions (list, detail, lineage, publish) and aliases; another tenant's rows stay invisible (404)."""

import pytest

from apps.training.models import JobStatus, TrainingJob
from tests.training.factories import TrainingJobFactory
from tests.training.helpers import MODEL, SYSTEM, base_version, qualified_trajectories

pytestmark = pytest.mark.django_db


@pytest.fixture
def base(tenant, tmp_path):
    from workers.inference.modelgen import create_default_model

    return base_version(tenant, create_default_model(tmp_path / "model", seed=0))


def test_create_freezes_the_qualified_queue_and_enqueues_on_commit(
    api_client, tenant, base, django_capture_on_commit_callbacks, monkeypatch
):
    from apps.training.tasks import run_training_job

    qualified_trajectories(tenant, groups=2, group_size=2)
    calls = []
    monkeypatch.setattr(run_training_job, "apply_async", lambda **kwargs: calls.append(kwargs))
    with django_capture_on_commit_callbacks(execute=True):
        response = api_client().post(
            "/api/v1/training-jobs/",
            {
                "base_version_id": base.pk,
                "algorithm": "decoupled_ppo",
                "total_steps": 4,
                "batch_size": 4,
                "staleness_bound": 2,
                "hyperparameters": {"learning_rate": 1e-4, "minibatches": 2},
            },
            format="json",
        )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == "queued"
    assert body["dataset"]["trajectories"] == 4
    assert body["config"]["total_steps"] == 8
    assert body["config"]["minibatches"] == 2
    assert len(body["dataset"]["content_hash"]) == 64
    assert calls == [{"args": [body["id"]], "queue": "train"}]


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        ({"algorithm": "dpo"}, "invalid"),
        ({"hyperparameters": {"learning_rate": -1}}, "invalid_hyperparameters"),
        ({"hyperparameters": {"no_such": 1}}, "invalid_hyperparameters"),
        ({"total_steps": 0}, "invalid"),
    ],
)
def test_create_rejects_bad_input_and_changes_nothing(api_client, tenant, base, payload, code):
    qualified_trajectories(tenant, groups=1, group_size=2)
    response = api_client().post(
        "/api/v1/training-jobs/", {"base_version_id": base.pk, "algorithm": "grpo", **payload}, format="json"
    )
    assert response.status_code in (400, 422), response.content
    assert response.json()["error"]["code"] == code
    assert not TrainingJob.objects.exists()


def test_create_refuses_an_empty_queue_and_another_tenants_base(api_client, tenant, other_tenant, base):
    response = api_client().post(
        "/api/v1/training-jobs/", {"base_version_id": base.pk, "algorithm": "sft"}, format="json"
    )
    assert response.json()["error"]["code"] == "empty_dataset"
    qualified_trajectories(other_tenant, groups=1, group_size=2)
    response = api_client(of=other_tenant).post(
        "/api/v1/training-jobs/", {"base_version_id": base.pk, "algorithm": "sft"}, format="json"
    )
    assert response.status_code == 404
    assert not TrainingJob.objects.exists()


def test_jobs_list_detail_cancel_are_tenant_isolated(api_client, tenant, other_tenant):
    mine = TrainingJobFactory(tenant=tenant)
    theirs = TrainingJobFactory(tenant=other_tenant)
    client = api_client()
    listed = client.get("/api/v1/training-jobs/").json()["results"]
    assert [row["id"] for row in listed] == [mine.pk]
    assert client.get(f"/api/v1/training-jobs/{theirs.pk}/").status_code == 404
    assert client.post(f"/api/v1/training-jobs/{theirs.pk}/cancel/").status_code == 404
    assert TrainingJob.objects.get(pk=theirs.pk).status == JobStatus.QUEUED

    detail = client.get(f"/api/v1/training-jobs/{mine.pk}/").json()
    assert detail["metrics"] == []
    assert detail["progress_percent"] == 0
    cancelled = client.post(f"/api/v1/training-jobs/{mine.pk}/cancel/").json()
    assert cancelled["status"] == "cancelled"
    again = client.post(f"/api/v1/training-jobs/{mine.pk}/cancel/")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "invalid_transition"


def test_cancel_of_a_running_job_only_flags_it(api_client, tenant):
    job = TrainingJobFactory(tenant=tenant, status=JobStatus.RUNNING, lease="abc")
    body = api_client().post(f"/api/v1/training-jobs/{job.pk}/cancel/").json()
    assert body["status"] == "running"
    assert body["cancel_requested"] is True


def test_versions_lineage_and_aliases(api_client, tenant, other_tenant):
    from apps.training.services import model_version_register

    root = model_version_register(
        tenant=tenant, actor=SYSTEM, name=MODEL, checkpoint_path="/m/0", tokenizer_hash="t"
    )
    child = model_version_register(
        tenant=tenant, actor=SYSTEM, name=MODEL, checkpoint_path="/m/1", tokenizer_hash="t", parent=root
    )
    model_version_register(
        tenant=other_tenant, actor=SYSTEM, name=MODEL, checkpoint_path="/x", tokenizer_hash="t"
    )
    client = api_client()
    assert [row["number"] for row in client.get("/api/v1/model-versions/").json()["results"]] == [1, 0]
    assert client.get(f"/api/v1/model-versions/{child.pk}/").json()["parent_id"] == root.pk
    lineage = client.get(f"/api/v1/model-versions/{child.pk}/lineage/").json()
    assert [(row["number"], row["parent"]) for row in lineage["versions"]] == [(0, None), (1, 0)]
    moved = client.post(
        "/api/v1/model-aliases/", {"alias": "candidate", "version_id": child.pk}, format="json"
    )
    assert moved.status_code == 200
    assert moved.json()["version"] == f"{MODEL}@1"
    assert [row["alias"] for row in client.get("/api/v1/model-aliases/").json()] == ["candidate"]
    theirs = api_client(of=other_tenant)
    assert theirs.get(f"/api/v1/model-versions/{child.pk}/").status_code == 404
    assert theirs.get("/api/v1/model-aliases/").json() == []
    assert (
        theirs.post(
            "/api/v1/model-aliases/", {"alias": "x", "version_id": child.pk}, format="json"
        ).status_code
        == 404
    )


def test_publish_with_no_backend_serving_reports_none(api_client, tenant):
    job = TrainingJobFactory(tenant=tenant)
    body = api_client().post(f"/api/v1/model-versions/{job.base_version_id}/publish/").json()
    assert body["backends"] == []
