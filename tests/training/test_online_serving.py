"""An online run that serves its versions (AReaL's online mode, `publish_to_backends`): each registered version
is loaded onto the model's backends and then serves, with production, the alias, routing and the serving
history following it; during a release of the model the release decides, so the version is only registered.
The runner runs in this process; the backend is a scripted stand-in on loopback."""

import pytest

from apps.loop import training_runs as runners
from apps.releases.models import RoutingState, ServingEvent
from apps.releases.routing_writes import routing_initialize
from apps.releases.services import release_create
from apps.training.models import ModelVersion, VersionStatus
from apps.training.online import online_run_start
from apps.training.selectors import alias_resolve
from apps.training.services import model_version_register
from tests.inference.factories import BackendFactory
from tests.network import scripted_http_server
from tests.training.helpers import MODEL, SYSTEM, base_version, qualified_trajectories

pytestmark = pytest.mark.django_db
LOADS = {("POST", "/admin/load"): (200, {}, {"ok": True})}


def _one_step(tenant, base):
    run = online_run_start(
        tenant=tenant,
        actor=SYSTEM,
        base_version=base,
        hyperparameters={"learning_rate": 1e-3},
        samples_per_step=4,
        staleness_bound=1,
        max_steps=1,
    )
    qualified_trajectories(tenant)
    return runners.online_run_execute(run_id=run.pk, poll_seconds=0), run


def test_each_published_version_serves_and_is_in_the_serving_history(
    tenant, default_model_dir, settings, tmp_path
):
    settings.AREAL_MODELS_DIR = tmp_path / "models"
    base = base_version(tenant, default_model_dir)
    routing_initialize(tenant=tenant, actor=SYSTEM, version=base, reason="the base serves")
    with scripted_http_server(LOADS) as (url, received):
        BackendFactory(tenant=tenant, name="slot-a", base_url=url, served_model=MODEL, model_version="0")
        result, run = _one_step(tenant, base)
    assert (result["status"], result["version"]) == ("stopped", 1)
    assert received == [("POST", "/admin/load")]
    trained = ModelVersion.objects.get(tenant=tenant, name=MODEL, number=1)
    base.refresh_from_db()
    assert (base.status, trained.status) == (VersionStatus.RETIRED, VersionStatus.PRODUCTION)
    assert alias_resolve(tenant=tenant, name=MODEL, alias="production") == trained
    assert RoutingState.objects.get(tenant=tenant, model=MODEL).stable == trained
    latest = ServingEvent.objects.filter(tenant=tenant).last()
    assert (latest.stable, latest.reason) == (trained, f"online run {run.pk}, step 1: loaded on slot-a")


def test_during_a_release_the_run_only_registers(tenant, default_model_dir, settings, tmp_path):
    settings.AREAL_MODELS_DIR = tmp_path / "models"
    base = base_version(tenant, default_model_dir)
    routing_initialize(tenant=tenant, actor=SYSTEM, version=base, reason="the base serves")
    other = model_version_register(
        tenant=tenant,
        actor=SYSTEM,
        name=MODEL,
        checkpoint_path=str(default_model_dir),
        tokenizer_hash=base.tokenizer_hash,
        parent=base,
    )
    release_create(tenant=tenant, actor=SYSTEM, candidate_id=other.pk, baseline_id=base.pk)
    with scripted_http_server(LOADS) as (url, received):
        BackendFactory(tenant=tenant, name="slot-a", base_url=url, served_model=MODEL, model_version="0")
        result, _run = _one_step(tenant, base)
    assert result["version"] == 2  # registered after the release's candidate (v1)
    assert received == []
    assert ModelVersion.objects.get(tenant=tenant, name=MODEL, number=2).status == VersionStatus.CANDIDATE
    assert RoutingState.objects.get(tenant=tenant, model=MODEL).stable == base
    assert ServingEvent.objects.filter(tenant=tenant).count() == 1
