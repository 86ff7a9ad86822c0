"""An eval run of a version nothing serves yet (a candidate an online run registered) first puts it on a free
serving slot, as a release's start does (apps/releases/provisioning.py), and fails at once with the reason when
it cannot, scoring nothing: never production's last backend, never a running canary's. Backends and the gateway
are scripted stand-ins on loopback; the runner is the eval worker's own function."""

import pytest

from apps.audit.models import AuditEvent
from apps.evaluation.models import EvalCaseResult, RunStatus
from apps.loop.eval_runs import eval_run_execute
from apps.releases.models import ReleaseStatus
from apps.training.models import VersionStatus
from apps.training.services import alias_move
from tests.evaluation.factories import EvalCaseFactory, EvalRunFactory, EvalSuiteFactory
from tests.inference.factories import BackendFactory
from tests.network import scripted_http_server
from tests.releases.helpers import MODEL, SYSTEM, version_with_weights

pytestmark = pytest.mark.django_db(transaction=True)  # as the worker runs: no enclosing transaction
ANSWER = {"choices": [{"message": {"role": "assistant", "content": "case-a"}}]}
ROUTES = {
    ("POST", "/admin/load"): (200, {}, {"ok": True}),
    ("POST", "/v1/chat/completions"): (200, {}, ANSWER),
}


def _run_of(tenant, version):
    suite = EvalSuiteFactory(tenant=tenant)
    EvalCaseFactory(suite=suite, key="case-a")
    return EvalRunFactory(suite=suite, model_version=version)


@pytest.fixture
def versions(tenant, tmp_path):
    production = version_with_weights(tenant, tmp_path / "v0", status=VersionStatus.PRODUCTION)
    alias_move(tenant=tenant, actor=SYSTEM, name=MODEL, alias="production", version=production)
    return production, version_with_weights(tenant, tmp_path / "v1", parent=production)


def test_a_candidate_nothing_serves_is_loaded_on_a_free_slot_then_evaluated(tenant, versions, settings):
    _, candidate = versions
    run = _run_of(tenant, candidate)
    with scripted_http_server(ROUTES) as (url, received):
        settings.AREAL_GATEWAY_URL = url  # the gateway's stand-in answers the case
        BackendFactory(tenant=tenant, name="slot-a", base_url=url, served_model=MODEL, model_version="0")
        slot_b = BackendFactory(
            tenant=tenant, name="slot-b", base_url=url, served_model=MODEL, model_version="0"
        )
        summary = eval_run_execute(run_id=run.pk)
    assert received == [("POST", "/admin/load"), ("POST", "/v1/chat/completions")]
    slot_b.refresh_from_db()
    assert slot_b.model_version == str(candidate.number)  # production keeps slot-a
    assert (summary["status"], summary["pass_rate"]) == (RunStatus.SUCCEEDED, 1.0)
    event = AuditEvent.objects.get(verb="eval_run.serve")
    assert "loaded on slot-b" in event.data["loaded"]


@pytest.mark.parametrize("taken_by", ["production", "canary"])
def test_a_run_with_no_free_slot_fails_at_once_with_the_reason(
    tenant, versions, settings, tmp_path, taken_by
):
    production, candidate = versions
    BackendFactory(tenant=tenant, name="slot-a", served_model=MODEL, model_version="0")
    if taken_by == "canary":  # slot-b serves a running release's candidate: the canary keeps it
        from apps.releases.models import Release
        from apps.releases.services import release_create

        release = release_create(tenant=tenant, actor=SYSTEM, candidate_id=candidate.pk)
        Release.objects.filter(pk=release.pk).update(status=ReleaseStatus.CANARY, stage_index=0)
        BackendFactory(tenant=tenant, name="slot-b", served_model=MODEL, model_version="1")
        tested = version_with_weights(tenant, tmp_path / "v2", parent=production)
    else:
        tested = candidate
    run = _run_of(tenant, tested)
    with scripted_http_server(ROUTES) as (url, received):
        settings.AREAL_GATEWAY_URL = url
        summary = eval_run_execute(run_id=run.pk)
    assert received == []  # nothing loaded, no case sent
    run.refresh_from_db()
    assert (summary["status"], run.status) == (RunStatus.FAILED, RunStatus.FAILED)
    assert run.error.startswith("no_free_slot: no serving slot is free")
    assert not EvalCaseResult.objects.filter(run=run).exists()


def test_a_served_version_is_evaluated_without_loading(tenant, versions, settings):
    production, _ = versions
    run = _run_of(tenant, production)
    with scripted_http_server(ROUTES) as (url, received):
        settings.AREAL_GATEWAY_URL = url
        BackendFactory(tenant=tenant, name="slot-a", base_url=url, served_model=MODEL, model_version="0")
        eval_run_execute(run_id=run.pk)
    assert received == [("POST", "/v1/chat/completions")]
    assert not AuditEvent.objects.filter(verb="eval_run.serve").exists()
