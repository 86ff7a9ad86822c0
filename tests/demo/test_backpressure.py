"""Online mode's back-pressure: /rl/start_session answers 429 + Retry-After once more sessions would exceed
the budget (ρ + v + 1)·B of the tenant's running online run (ρ: its rollout bound, else η), and admits again as
the run advances."""

import httpx
import pytest

from apps.audit.services import Actor
from apps.training.models import OnlineRun, OnlineRunStatus
from apps.training.online import online_capacity
from apps.training.services import model_version_register
from tests.gateway.conftest import agent_key, gateway  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)


def _run(tenant, *, batch: int, eta: int, rho: int | None = None) -> OnlineRun:
    base = model_version_register(
        tenant=tenant,
        actor=Actor.system("test"),
        name="default",
        checkpoint_path="/nonexistent",
        tokenizer_hash="t",
    )
    return OnlineRun.objects.create(
        tenant=tenant,
        model_name="default",
        base_version=base,
        current_version=base,
        samples_per_step=batch,
        staleness_bound=eta,
        rollout_bound=rho,
    )


def _start(url, key):
    return httpx.post(
        f"{url}/rl/start_session", json={"task_id": "weather"}, headers={"Authorization": f"Bearer {key}"}
    )


def test_start_session_is_held_back_beyond_the_staleness_budget(gateway, agent_key, tenant, other_tenant):  # noqa: F811
    url, _ = gateway
    key = agent_key("inference")
    run = _run(tenant, batch=2, eta=1)  # budget (1 + 0 + 1) * 2 = 4 sessions before the first step
    assert [_start(url, key).status_code for _ in range(4)] == [200] * 4
    refused = _start(url, key)
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["error"]["code"] == "no_training_capacity"
    assert online_capacity(tenant_id=tenant.pk)[0] == 0
    assert (
        _start(url, agent_key("inference", of=other_tenant)).status_code == 200
    )  # other tenants: no run, no limit

    OnlineRun.objects.filter(pk=run.pk).update(steps=1)  # one step trained: room for B more
    assert [_start(url, key).status_code for _ in range(3)] == [200, 200, 429]
    OnlineRun.objects.filter(pk=run.pk).update(status=OnlineRunStatus.STOPPED)
    assert _start(url, key).status_code == 200
    assert online_capacity(tenant_id=tenant.pk) is None


def test_sessions_that_can_never_be_trained_on_free_the_budget(gateway, agent_key, tenant):  # noqa: F811
    from apps.qualification.models import Qualification
    from apps.training.models import OnlineConsumption
    from apps.trajectories.models import Trajectory

    url, _ = gateway
    key = agent_key("inference")
    run = _run(tenant, batch=1, eta=1)  # budget 2
    first, second = (_start(url, key).json()["session_id"] for _ in range(2))
    assert _start(url, key).status_code == 429
    rejected = Trajectory.objects.get(session_id=first)
    Qualification.objects.create(tenant=tenant, trajectory=rejected, status="disqualified")
    assert _start(url, key).status_code == 200  # the disqualified session no longer holds a place
    assert _start(url, key).status_code == 429
    stale = Trajectory.objects.get(session_id=second)
    OnlineConsumption.objects.create(tenant=tenant, run=run, trajectory_id=stale.pk, outcome="stale")
    assert _start(url, key).status_code == 200
    assert _start(url, key).status_code == 429
    # a member of a settled group whose rewards were all alike, consumed untrained (whole groups)
    alike = Trajectory.objects.exclude(session_id__in=(first, second)).order_by("started_at").first()
    OnlineConsumption.objects.create(tenant=tenant, run=run, trajectory_id=alike.pk, outcome="uniform")
    assert _start(url, key).status_code == 200


def test_a_rollout_bound_paces_sessions_apart_from_eta(gateway, agent_key, tenant):  # noqa: F811
    """A run whose data comes from production (which lags the learner by a release) keeps a wide η so that what
    arrives is not dropped, and a narrow ρ so that no more arrives than the learner trains."""
    url, _ = gateway
    key = agent_key("inference")
    run = _run(tenant, batch=2, eta=8, rho=0)  # budget (0 + 0 + 1) * 2 = 2, where η alone would allow 18
    assert [_start(url, key).status_code for _ in range(3)] == [200, 200, 429]
    assert online_capacity(tenant_id=tenant.pk)[0] == 0
    OnlineRun.objects.filter(pk=run.pk).update(steps=1)
    assert [_start(url, key).status_code for _ in range(3)] == [200, 200, 429]
    OnlineRun.objects.filter(pk=run.pk).update(rollout_bound=None)  # no ρ: η paces, (8 + 1 + 1) * 2 = 20
    assert online_capacity(tenant_id=tenant.pk)[0] == 20 - 4
