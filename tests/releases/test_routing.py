"""Session routing through the real gateway: a new session is hashed to the candidate or the baseline at the
stage's percentage and keeps its version across stage changes (in this gateway process and in another one);
a rollback moves every session to the baseline on its next request and no request fails meanwhile."""

import threading
import time

import httpx
import pytest

from apps.gateway.sessions import SessionIndex
from apps.inference.models import BackendKind, BackendState
from apps.releases.analysis import release_analyze
from apps.releases.models import ReleaseStatus, RoutingState, SessionRoute
from apps.releases.services import release_create, release_rollback, release_start
from apps.releases.version_routing import routing_cache_clear, routing_plan, session_bucket
from apps.trajectories.models import Step
from tests.gateway.conftest import MODEL, agent_key, embedded_backend_url, gateway  # noqa: F401  (fixtures)
from tests.gateway.helpers import drain
from tests.inference.factories import BackendFactory
from tests.releases.factories import RoutingStateFactory
from tests.releases.helpers import SYSTEM, register_versions
from tests.workers.inference.conftest import default_model_dir  # noqa: F401  (fixture)

MESSAGES = [{"role": "user", "content": "Say something."}]


def _versions_by_session(sessions) -> dict[str, list[str]]:
    served: dict[str, list[str]] = {}
    for session_id, version in (
        Step.objects.filter(trajectory__session_id__in=sessions)
        .order_by("trajectory__session_id", "index")
        .values_list("trajectory__session_id", "model_version")
    ):
        served.setdefault(session_id, []).append(version)
    return served


@pytest.mark.django_db(transaction=True)
def test_sessions_stick_to_their_version_across_stages_and_processes(
    gateway,
    tenant,
    agent_key,  # noqa: F811
    embedded_backend_url,  # noqa: F811
    django_capture_on_commit_callbacks,
):
    url, gw = gateway
    baseline, candidate = register_versions(tenant, name=MODEL)
    for version in (baseline, candidate):  # one server registered under both versions
        BackendFactory(
            tenant=tenant,
            name=f"v{version.number}",
            base_url=embedded_backend_url,
            kind=BackendKind.EMBEDDED,
            served_model=MODEL,
            model_version=str(version.number),
            state=BackendState.UP,
        )
    release = release_create(tenant=tenant, actor=SYSTEM, candidate_id=candidate.pk, stages=[20, 60, 100])
    with django_capture_on_commit_callbacks(execute=False):
        release_start(tenant=tenant, actor=SYSTEM, release_id=release.pk)
    release = release_analyze(tenant=tenant, release_id=release.pk)
    assert (release.status, release.stage_percent) == (ReleaseStatus.CANARY, 20.0)

    client = httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {agent_key('inference')}"}, timeout=60
    )

    def ask(session_id):
        return client.post(
            "/v1/chat/completions",
            headers={"X-Session-Id": session_id},
            json={"model": MODEL, "messages": MESSAGES, "max_tokens": 2, "temperature": 0},
        ).status_code

    statuses, stop = [], threading.Event()

    def background():
        index = 0
        with httpx.Client(base_url=url, headers=client.headers, timeout=60) as own:
            while not stop.is_set():
                statuses.append(
                    own.post(
                        "/v1/chat/completions",
                        headers={"X-Session-Id": f"bg-{index % 7}"},
                        json={"model": MODEL, "messages": MESSAGES, "max_tokens": 2},
                    ).status_code
                )
                index += 1

    worker = threading.Thread(target=background, daemon=True)
    worker.start()
    first = [f"early-{index}" for index in range(30)]
    assert {ask(session_id) for session_id in first} == {200}
    release = release_analyze(tenant=tenant, release_id=release.pk)  # no guardrails: successful → next stage
    assert release.stage_percent == 60.0
    assert {ask(session_id) for session_id in first} == {200}
    gw.sessions = SessionIndex()  # as another gateway process would see it: no in-memory session state
    assert {ask(session_id) for session_id in first} == {200}
    later = [f"late-{index}" for index in range(30)]
    assert {ask(session_id) for session_id in later} == {200}
    drain(gw)

    served = _versions_by_session(first + later)
    for session_id in first:
        expected = "1" if session_bucket(tenant_id=tenant.pk, session_id=session_id) < 20 else "0"
        assert served[session_id] == [expected] * 3, session_id  # kept through the stage change
    for session_id in later:
        expected = "1" if session_bucket(tenant_id=tenant.pk, session_id=session_id) < 60 else "0"
        assert served[session_id] == [expected]
    moved_up = [s for s in first if 20 <= session_bucket(tenant_id=tenant.pk, session_id=s) < 60]
    assert moved_up
    assert all(served[s] == ["0"] * 3 for s in moved_up)
    assert SessionRoute.objects.filter(tenant=tenant, session_id__in=first + later).count() == 60

    on_candidate = [s for s in first + later if served[s][-1] == "1"]
    release_rollback(tenant=tenant, actor=SYSTEM, release_id=release.pk, reason="test")
    assert {ask(session_id) for session_id in on_candidate} == {200}
    stop.set()
    worker.join(timeout=60)
    drain(gw)
    assert statuses
    assert set(statuses) == {200}
    served = _versions_by_session(on_candidate)
    assert all(versions[-1] == "0" for versions in served.values())


@pytest.mark.django_db
def test_a_routing_change_reaches_new_sessions_within_the_cache_time(tenant, settings):
    settings.AREAL_ROUTING_CACHE_SECONDS = 0.3
    routing_cache_clear()
    baseline, candidate = register_versions(tenant)
    assert routing_plan(tenant_id=tenant.pk, model=baseline.name) is None
    routing_cache_clear()
    RoutingStateFactory(tenant=tenant, model=baseline.name, stable=baseline)
    assert routing_plan(tenant_id=tenant.pk, model=baseline.name).canary is None
    RoutingState.objects.filter(tenant=tenant).update(
        canary=candidate, canary_percent=30
    )  # another process's write
    assert routing_plan(tenant_id=tenant.pk, model=baseline.name).canary is None  # cached
    time.sleep(0.35)
    plan = routing_plan(tenant_id=tenant.pk, model=baseline.name)
    assert (plan.canary, plan.percent) == (str(candidate.number), 30)
    routing_cache_clear()


def test_session_buckets_are_stable_and_spread():
    buckets = [session_bucket(tenant_id=1, session_id=f"s-{index}") for index in range(4000)]
    assert buckets[:10] == [session_bucket(tenant_id=1, session_id=f"s-{index}") for index in range(10)]
    assert all(0 <= bucket < 100 for bucket in buckets)
    share = sum(bucket < 25 for bucket in buckets) / len(buckets)
    assert 0.22 < share < 0.28
    assert session_bucket(tenant_id=1, session_id="s-1") != session_bucket(tenant_id=2, session_id="s-1")
