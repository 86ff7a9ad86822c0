"""Console pages of training: job list, new-job form with validation, job detail with its charts and
cancel, version list and lineage; another tenant's job or model is a 404 page; viewers cannot create."""

import json

import pytest
from django.test import Client

from apps.tenants.permissions import Role
from apps.training.models import JobStatus, TrainingJob
from apps.training.services import model_version_register
from tests.training.factories import OnlineRunFactory, TrainingJobFactory, TrainingMetricFactory
from tests.training.helpers import MODEL, SYSTEM, base_version, qualified_trajectories

pytestmark = pytest.mark.django_db


def signed_in(member, role=Role.OPERATOR, **kwargs):
    client = Client()
    client.force_login(member(role, **kwargs))
    return client


def test_job_list_and_detail_with_charts(member, tenant, other_tenant):
    job = TrainingJobFactory(tenant=tenant, status=JobStatus.RUNNING, progress_step=2)
    for step in (1, 2):
        TrainingMetricFactory(
            job=job,
            step=step,
            values={"loss": 1.0 / step, "reward_mean": 0.1 * step, "staleness_histogram": [[0, 10], [1, 4]]},
        )
    theirs = TrainingJobFactory(tenant=other_tenant)
    client = signed_in(member)
    listing = client.get("/training/jobs/")
    assert listing.status_code == 200
    assert f'data-job="{job.pk}"'.encode() in listing.content
    assert f'data-job="{theirs.pk}"'.encode() not in listing.content
    # A job is named by what it does; its link keeps the id.
    title = f"Training of {job.base_version.name} from v{job.base_version.number}"
    assert f'href="/training/jobs/{job.pk}/">{title}</a>' in listing.content.decode()
    assert f">#{job.pk}<" not in listing.content.decode()
    page = client.get(f"/training/jobs/{job.pk}/")
    assert page.status_code == 200
    assert f"<h1>{title} (" in page.content.decode()
    assert f"#{job.pk}" not in page.content.decode()
    figures = json.loads(
        page.content.decode().split('id="job-figures" type="application/json">')[1].split("</script>")[0]
    )
    assert figures["loss"]["data"][0]["y"] == [1.0, 0.5]
    assert figures["staleness"]["data"][0]["x"] == [0, 1]
    assert b'id="cancel-job"' in page.content
    assert b"training.job-" in page.content
    assert client.get(f"/training/jobs/{theirs.pk}/").status_code == 404


def test_new_job_form_validates_and_creates(member, tenant, tmp_path, monkeypatch):
    from apps.training.tasks import run_training_job
    from workers.inference.modelgen import create_default_model

    monkeypatch.setattr(run_training_job, "apply_async", lambda **kwargs: None)
    base = base_version(tenant, create_default_model(tmp_path / "model", seed=0))
    client = signed_in(member)
    assert client.get("/training/jobs/new/").status_code == 200
    form = {
        "base_version": base.pk,
        "algorithm": "grpo",
        "learning_rate": 1e-4,
        "schedule": "cosine",
        "warmup_steps": 5,
        "batch_size": 4,
        "total_steps": 5,
        "checkpoint_every": 2,
        "lora_rank": 0,
    }
    invalid = client.post("/training/jobs/new/", form)
    assert invalid.status_code == 400
    assert b"Warm-up must be shorter" in invalid.content
    empty = client.post("/training/jobs/new/", {**form, "warmup_steps": 1})
    assert empty.status_code == 400
    assert b"no qualified trajectory" in empty.content
    assert not TrainingJob.objects.exists()
    qualified_trajectories(tenant, groups=1, group_size=2)
    created = client.post(
        "/training/jobs/new/", {**form, "warmup_steps": 1, "lora_rank": 4, "staleness_bound": 1}
    )
    job = TrainingJob.objects.get()
    assert created.status_code == 302
    assert created["Location"] == f"/training/jobs/{job.pk}/"
    assert job.config["lora"]["rank"] == 4
    assert job.staleness_bound == 1
    assert job.config["schedule"] == "cosine"


def test_viewers_cannot_create_or_cancel(member, tenant):
    job = TrainingJobFactory(tenant=tenant)
    client = signed_in(member, Role.VIEWER)
    assert client.get("/training/jobs/").status_code == 200
    assert client.get("/training/jobs/new/").status_code == 403
    assert client.post(f"/training/jobs/{job.pk}/cancel/").status_code == 403
    assert TrainingJob.objects.get(pk=job.pk).status == JobStatus.QUEUED


def test_cancel_from_the_console(member, tenant):
    job = TrainingJobFactory(tenant=tenant)
    response = signed_in(member).post(f"/training/jobs/{job.pk}/cancel/")
    assert response.status_code == 302
    assert TrainingJob.objects.get(pk=job.pk).status == JobStatus.CANCELLED


def test_versions_and_lineage_tree(member, tenant, other_tenant):
    root = model_version_register(
        tenant=tenant, actor=SYSTEM, name=MODEL, checkpoint_path="/m/0", tokenizer_hash="t"
    )
    first = model_version_register(
        tenant=tenant, actor=SYSTEM, name=MODEL, checkpoint_path="/m/1", tokenizer_hash="t", parent=root
    )
    model_version_register(
        tenant=tenant, actor=SYSTEM, name=MODEL, checkpoint_path="/m/2", tokenizer_hash="t", parent=first
    )
    model_version_register(
        tenant=tenant, actor=SYSTEM, name=MODEL, checkpoint_path="/m/3", tokenizer_hash="t", parent=root
    )
    model_version_register(
        tenant=other_tenant, actor=SYSTEM, name="secret-model", checkpoint_path="/x", tokenizer_hash="t"
    )
    client = signed_in(member, Role.VIEWER)
    listing = client.get("/models/")
    assert listing.status_code == 200
    assert b"secret-model" not in listing.content
    page = client.get(f"/models/{MODEL}/lineage/")
    assert page.status_code == 200
    order = [int(part.split('"')[0]) for part in page.content.decode().split('data-number="')[1:]]
    assert order == [0, 1, 2, 3]  # depth first: v2 under v1, v3 under v0
    assert b'data-number="2" data-parent="1"' in page.content
    assert client.get("/models/secret-model/lineage/").status_code == 404


def test_job_list_shows_the_tenants_online_runs(member, tenant, other_tenant):
    def run_of(owner, steps):
        base = model_version_register(
            tenant=owner, actor=SYSTEM, name=MODEL, checkpoint_path="/nonexistent", tokenizer_hash="t"
        )
        return OnlineRunFactory(
            tenant=owner,
            model_name=base.name,
            base_version=base,
            current_version=base,
            staleness_bound=8,
            steps=steps,
            dropped_stale=3,
            publish_to_backends=False,
        )

    ours, theirs = run_of(tenant, 12), run_of(other_tenant, 5)
    page = signed_in(member).get("/training/jobs/")
    assert page.status_code == 200
    row = page.content.decode().split(f'data-online-run="{ours.pk}"')[1].split("</tr>")[0]
    assert "<td>12</td>" in row
    assert f"<td>Online run of {MODEL} from v{ours.base_version.number}</td>" in row
    assert f"#{ours.pk}" not in row
    assert "no (releases decide)" in row
    assert f'data-online-run="{theirs.pk}"'.encode() not in page.content
