"""Online runs started and stopped directly (not only through the evolution control plane): the REST API
(`/api/v1/online-runs/`), the console's Training page and `manage.py onlinerun`. Operators start and stop;
another tenant's run or version is a 404; bad input names its field; the train task is enqueued on commit."""

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from apps.audit.models import AuditEvent
from apps.tenants.permissions import Role
from apps.training.models import OnlineRun, OnlineRunStatus, VersionStatus
from apps.training.services import alias_move
from tests.training.factories import ModelVersionFactory, OnlineRunFactory
from tests.training.helpers import SYSTEM

pytestmark = pytest.mark.django_db


@pytest.fixture
def enqueued(monkeypatch):
    """The run ids `training.run_online` was sent for (no worker runs here)."""
    from apps.training.tasks import run_online

    sent = []
    monkeypatch.setattr(run_online, "delay", lambda run_id: sent.append(run_id))
    return sent


def _production(tenant, name="support-bot"):
    version = ModelVersionFactory(tenant=tenant, name=name, status=VersionStatus.PRODUCTION)
    alias_move(tenant=tenant, actor=SYSTEM, name=name, alias="production", version=version)
    return version


def test_an_operator_starts_a_run_and_stops_it(
    api_client, member, tenant, enqueued, django_capture_on_commit_callbacks
):
    base = _production(tenant)
    client = api_client(user=member(Role.OPERATOR))
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            "/api/v1/online-runs/",
            {
                "model": "support-bot",
                "hyperparameters": {"learning_rate": 2e-5},
                "samples_per_step": 8,
                "staleness_bound": 8,
                "rollout_bound": 1,
                "publish_to_backends": False,
            },
            format="json",
        )
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["model"], body["base_version_id"], body["status"]) == ("support-bot", base.pk, "running")
    assert (body["samples_per_step"], body["staleness_bound"], body["publish_to_backends"]) == (8, 8, False)
    assert body["rollout_bound"] == 1
    assert body["config"]["learning_rate"] == 2e-5
    assert enqueued == [body["id"]]
    assert AuditEvent.objects.filter(tenant=tenant, verb="online_run.start").count() == 1

    detail = client.get(f"/api/v1/online-runs/{body['id']}/")
    assert detail.status_code == 200
    assert detail.json()["losses"] == []
    assert [row["id"] for row in client.get("/api/v1/online-runs/").json()["results"]] == [body["id"]]

    stopped = client.post(f"/api/v1/online-runs/{body['id']}/stop/")
    assert stopped.status_code == 200
    assert stopped.json()["stop_requested"] is True
    assert AuditEvent.objects.filter(tenant=tenant, verb="online_run.stop").count() == 1


def test_one_run_at_a_time_and_the_refusal_names_it(api_client, tenant, enqueued):
    base = _production(tenant)
    running = OnlineRunFactory(tenant=tenant, base_version=base)
    response = api_client().post("/api/v1/online-runs/", {"base_version_id": base.pk}, format="json")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "online_run_exists"
    assert f"Online run of {running.model_name} from v{base.number}" in response.json()["error"]["message"]
    assert f"#{running.pk}" not in response.json()["error"]["message"]
    assert OnlineRun.objects.count() == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "base_version_id"),
        ({"model": "support-bot", "base_version_id": 1}, "base_version_id"),
        ({"model": "no-such-model"}, "model"),
        ({"model": "support-bot", "samples_per_step": 0}, "samples_per_step"),
        ({"model": "support-bot", "staleness_bound": -1}, "staleness_bound"),
        ({"model": "support-bot", "rollout_bound": -1}, "rollout_bound"),
        ({"model": "support-bot", "rollout_bound": "soon"}, "rollout_bound"),
        ({"model": "support-bot", "hyperparameters": {"no_such_setting": 1}}, "hyperparameters"),
    ],
)
def test_bad_input_names_its_field_and_starts_nothing(api_client, tenant, enqueued, body, field):
    _production(tenant)
    response = api_client().post("/api/v1/online-runs/", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"], response.json()
    assert not OnlineRun.objects.exists()
    assert enqueued == []


@pytest.mark.parametrize("role", [Role.ANNOTATOR, Role.VIEWER])
def test_only_operators_start_and_stop(api_client, member, tenant, enqueued, role):
    base = _production(tenant)
    run = OnlineRunFactory(tenant=tenant, base_version=base)
    client = api_client(user=member(role))
    assert client.get("/api/v1/online-runs/").status_code == 200
    run.delete()
    assert client.post("/api/v1/online-runs/", {"base_version_id": base.pk}, format="json").status_code == 403
    assert not OnlineRun.objects.exists()
    mine = OnlineRunFactory(tenant=tenant, base_version=base)
    assert client.post(f"/api/v1/online-runs/{mine.pk}/stop/").status_code == 403
    mine.refresh_from_db()
    assert mine.stop_requested is False


def test_another_tenants_runs_and_versions_are_404s(api_client, tenant, other_tenant, enqueued):
    theirs = OnlineRunFactory(tenant=other_tenant)
    client = api_client()
    assert client.get(f"/api/v1/online-runs/{theirs.pk}/").status_code == 404
    assert client.post(f"/api/v1/online-runs/{theirs.pk}/stop/").status_code == 404
    theirs.refresh_from_db()
    assert theirs.stop_requested is False
    started = client.post("/api/v1/online-runs/", {"base_version_id": theirs.base_version_id}, format="json")
    assert started.status_code == 404
    assert client.get("/api/v1/online-runs/").json()["results"] == []
    assert OnlineRun.objects.filter(tenant=tenant).count() == 0


def _signed_in(member, role):
    client = Client()
    client.force_login(member(role))
    return client


def test_the_training_page_starts_and_stops_a_run(member, tenant, other_tenant, enqueued):
    base = _production(tenant)
    operator = _signed_in(member, Role.OPERATOR)
    assert b'id="new-online-run"' in operator.get("/training/jobs/").content
    assert operator.get("/training/online/new/").status_code == 200
    bad = operator.post("/training/online/new/", {"base_version": base.pk, "learning_rate": 1e-5})
    assert bad.status_code == 400
    assert b'data-field="samples_per_step"' in bad.content
    form = {
        "base_version": base.pk,
        "learning_rate": 1e-5,
        "samples_per_step": 4,
        "publish_every": 1,
        "staleness_bound": 1,
        "publish_to_backends": "on",
    }
    assert operator.post("/training/online/new/", form).status_code == 302
    run = OnlineRun.objects.get(tenant=tenant)
    assert (run.samples_per_step, run.publish_to_backends, run.base_version) == (4, True, base)
    second = operator.post("/training/online/new/", form)
    assert second.status_code == 400
    assert f"Online run of {base.name} from v{base.number} is running".encode() in second.content
    assert f"#{run.pk}".encode() not in second.content
    page = operator.get("/training/jobs/")
    assert f'data-stop-run="{run.pk}"'.encode() in page.content
    assert operator.post(f"/training/online/{run.pk}/stop/").status_code == 302
    run.refresh_from_db()
    assert run.stop_requested is True
    theirs = OnlineRunFactory(tenant=other_tenant)
    assert operator.post(f"/training/online/{theirs.pk}/stop/").status_code == 404
    viewer = _signed_in(member, Role.VIEWER)
    assert viewer.get("/training/online/new/").status_code == 403
    assert b'id="new-online-run"' not in viewer.get("/training/jobs/").content


def test_onlinerun_starts_from_production_and_stops(
    tenant, enqueued, django_capture_on_commit_callbacks, capsys
):
    with pytest.raises(CommandError, match="no production version"):
        call_command("onlinerun", tenant.slug, "start", "--model", "support-bot")
    base = _production(tenant)
    with django_capture_on_commit_callbacks(execute=True):
        call_command("onlinerun", tenant.slug, "start", "--model", "support-bot", "--samples-per-step", "4")
    run = OnlineRun.objects.get(tenant=tenant)
    assert (run.base_version, run.samples_per_step, run.status) == (base, 4, OnlineRunStatus.RUNNING)
    assert enqueued == [run.pk]
    call_command("onlinerun", tenant.slug, "stop")
    run.refresh_from_db()
    assert run.stop_requested is True
    OnlineRun.objects.filter(pk=run.pk).update(status=OnlineRunStatus.STOPPED)
    with pytest.raises(CommandError, match="no running online run"):
        call_command("onlinerun", tenant.slug, "stop")
