"""The tenant overview: aggregate selectors, server-built figures on the console home page, the gateway
traffic hook and the outcome tick (in process; the real-worker timing is in test_live_worker.py)."""

import json
import time
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.utils import timezone

from apps.audit.services import Actor
from apps.loop.outcomes import overview_tick
from apps.metrics.publish import chart_time
from apps.metrics.traffic import gateway_steps_recorded, traffic_points
from apps.releases.models import AnalysisRun, Release, ReleaseStatus
from apps.rewards.selectors import reward_outcomes_per_minute
from apps.tenants.permissions import Role
from apps.training.services import alias_move
from apps.trajectories.selectors import step_traffic_per_minute
from areal_web.asgi import application
from tests.metrics.exposition import sample
from tests.releases.helpers import release_at
from tests.rewards.factories import RewardFactory
from tests.tenants.factories import MembershipFactory
from tests.training.factories import OnlineRunFactory, TrainingJobFactory, TrainingMetricFactory
from tests.trajectories.builders import gateway_step, ingested
from tests.trajectories.factories import TrajectoryFactory


@pytest.mark.django_db
def test_traffic_per_minute_counts_errors_and_percentiles_of_the_tenant_only(tenant, other_tenant):
    minute = timezone.now().replace(second=5, microsecond=0) - timedelta(minutes=2)
    records = [
        gateway_step(tenant, "s1", latency_ms=10 * (i + 1), created_at=minute + timedelta(seconds=i))
        for i in range(20)
    ]
    records[0]["error"] = "backend timeout"
    ingested(tenant, "s1", records)
    ingested(other_tenant, "s2", [gateway_step(other_tenant, "s2", created_at=minute, latency_ms=9999)])
    ingested(tenant, "old", [gateway_step(tenant, "old", created_at=minute - timedelta(hours=5))])

    rows = step_traffic_per_minute(tenant=tenant, since=minute - timedelta(hours=1))

    assert rows == [
        {"minute": minute.replace(second=0), "requests": 20, "errors": 1, "p50_ms": 105.0, "p95_ms": 190.5}
    ]  # latencies 10..200: percentiles interpolate between the nearest ranks (workers.stats.percentile)


@pytest.mark.django_db
def test_outcomes_per_minute_mean_and_success_rate(tenant, other_tenant):
    trajectory = TrajectoryFactory(tenant=tenant)
    earlier = timezone.now().replace(second=1, microsecond=0) - timedelta(minutes=3)
    for value in (1.0, 0.0, 1.0, 0.2):
        RewardFactory(trajectory=trajectory, value=value, source="environment", created_at=earlier)
    RewardFactory(trajectory=trajectory, value=1.0, source="environment")
    # A correction, not a score:
    RewardFactory(trajectory=trajectory, value=0.0, source="environment", kind="critique")
    RewardFactory(trajectory=TrajectoryFactory(tenant=other_tenant), value=0.0, source="environment")

    rows = reward_outcomes_per_minute(tenant=tenant, since=earlier - timedelta(minutes=1))

    assert [(row["rewards"], row["reward_mean"], row["success_rate"]) for row in rows] == [
        (4, pytest.approx(0.55), 0.5),
        (1, 1.0, 1.0),
    ]
    assert rows[0]["minute"] == earlier.replace(second=0)


@pytest.mark.django_db
def test_home_page_draws_every_overview_chart_from_the_database(tenant, other_tenant, client):
    user = MembershipFactory(tenant=tenant, role=Role.VIEWER).user
    ingested(
        tenant, "s1", [gateway_step(tenant, "s1", latency_ms=30), gateway_step(tenant, "s1", latency_ms=50)]
    )
    ingested(other_tenant, "x", [gateway_step(other_tenant, "x")])
    RewardFactory(trajectory=TrajectoryFactory(tenant=tenant, steps=0), value=1.0, source="environment")
    release = release_at(tenant, ReleaseStatus.CANARY, stage_index=0, stages=[10, 100])
    alias_move(
        tenant=tenant,
        actor=Actor.system("test"),
        name=release.model,
        alias="production",
        version=release.candidate,
        reason="promoted",
    )
    AnalysisRun.objects.create(
        tenant=tenant,
        release=release,
        stage_index=0,
        verdict="successful",
        decision="continue",
        measurements=[
            {
                "metric": "reward_mean",
                "candidate": 0.8,
                "baseline": 0.5,
                "candidate_samples": 10,
                "baseline_samples": 30,
            }
        ],
    )
    job = TrainingJobFactory(tenant=tenant, status="running")
    TrainingMetricFactory(job=job, step=1, values={"loss": 2.5})
    TrainingMetricFactory(job=job, step=2, values={"loss": 2.25})
    client.force_login(user)

    response = client.get("/")

    assert response.status_code == 200
    content = response.content.decode()
    figures = json.loads(
        content.split('id="overview-figures" type="application/json">')[1].split("</script>")[0]
    )
    live = json.loads(content.split('id="overview-live" type="application/json">')[1].split("</script>")[0])
    releases = json.loads(
        content.split('id="overview-release-figures" type="application/json">')[1].split("</script>")[0]
    )
    assert set(figures) == {"traffic", "latency", "outcomes", "loss"}
    assert figures["traffic"]["data"][0]["y"] == [2]  # the other tenant's call is not counted
    assert figures["latency"]["data"][0]["y"] == [40.0]  # p50 of 30 and 50 ms
    assert figures["latency"]["data"][1]["y"] == [49.0]  # p95
    assert figures["outcomes"]["data"][0]["y"] == [1.0]
    assert figures["outcomes"]["data"][1]["y"] == [1.0]
    markers = [note["text"] for note in figures["outcomes"]["layout"]["annotations"]]
    # the release's band, then the baseline's move and the promotion
    assert markers == [
        f"v{release.candidate.number} canary 10 %",
        f"{release.model} v0",
        f"{release.model} v1",
    ]
    assert [shape["type"] for shape in figures["outcomes"]["layout"]["shapes"]] == ["rect", "line", "line"]
    assert figures["loss"]["data"][0]["name"] == f"job {job.pk}"
    assert figures["loss"]["data"][0]["y"] == [2.5, 2.25]
    assert releases["reward_mean"]["data"][0]["y"] == [0.8]
    assert releases["reward_mean"]["data"][1]["y"] == [0.5]
    assert live == {
        "tenant": "acme",
        "traffic": "gateway.traffic",
        "outcomes": "overview.outcomes",
        "jobs": "training.jobs",
        "job_streams": {str(job.pk): f"training.job-{job.pk}"},
        "online_streams": {},
        "release": f"release-{release.pk}",
    }
    assert 'src="/static/js/dashboard.js"' in content


@pytest.mark.django_db
def test_the_overview_bands_each_release_that_served_with_its_version_and_how_it_went(
    tenant, other_tenant, client
):
    from apps.loop.overview import WINDOW, overview_context

    now = timezone.now()
    promoted = release_at(tenant, ReleaseStatus.PROMOTED)
    Release.objects.filter(pk=promoted.pk).update(
        canary_started_at=now - timedelta(hours=2), finished_at=now - timedelta(hours=1)
    )
    old = release_at(tenant, ReleaseStatus.ROLLED_BACK)  # ended before the window
    Release.objects.filter(pk=old.pk).update(
        canary_started_at=now - WINDOW - timedelta(hours=2), finished_at=now - WINDOW - timedelta(hours=1)
    )
    release_at(tenant, ReleaseStatus.ABORTED)  # stopped before any canary
    awaiting = release_at(tenant, ReleaseStatus.AWAITING_APPROVAL, stage_index=0)
    Release.objects.filter(pk=awaiting.pk).update(canary_started_at=now - timedelta(minutes=30))
    release_at(other_tenant, ReleaseStatus.CANARY, stage_index=0)

    layout = overview_context(tenant=tenant)["overview_figures"]["outcomes"]["layout"]
    bands = [shape for shape in layout["shapes"] if shape["type"] == "rect"]
    assert [band["name"] for band in bands] == [f"release-{awaiting.pk}", f"release-{promoted.pk}"]
    assert bands[1]["x0"] == chart_time(now - timedelta(hours=2))
    assert bands[1]["x1"] == chart_time(now - timedelta(hours=1))
    assert bands[0]["x1"] >= chart_time(now)  # still under way: up to now
    words = [note["text"] for note in layout["annotations"]]
    assert f"v{awaiting.candidate.number} awaiting approval" in words
    assert f"v{promoted.candidate.number} promoted" in words
    assert not any("rolled back" in text or "aborted" in text for text in words)
    traffic = overview_context(tenant=tenant)["overview_figures"]["traffic"]["layout"]
    assert len([shape for shape in traffic["shapes"] if shape["type"] == "rect"]) == 2
    client.force_login(MembershipFactory(tenant=tenant, role=Role.VIEWER).user)
    page = client.get("/").content.decode()
    awaits = page.split('id="overview-awaiting">')[1].split("</p>")[0]
    assert f"v{awaiting.candidate.number} of <code>{awaiting.model}</code>" in awaits
    assert f'href="/releases/{awaiting.pk}/"' in awaits


@pytest.mark.django_db
def test_online_runs_loss_is_drawn_and_streamed(tenant, other_tenant, client):
    """An online run's loss comes from the versions it registered; a running run's step stream is listened to."""
    from apps.training.services import model_version_register

    def run_with_losses(owner, losses):
        base = model_version_register(
            tenant=owner,
            actor=Actor.system("test"),
            name="weather",
            checkpoint_path="/nonexistent",
            tokenizer_hash="t",
        )
        run = OnlineRunFactory(tenant=owner, model_name="weather", base_version=base, current_version=base)
        for step, loss in enumerate(losses, 1):
            model_version_register(
                tenant=owner,
                actor=Actor.system("test"),
                name="weather",
                parent=base,
                checkpoint_path="/nonexistent",
                tokenizer_hash="t",
                metrics={"online": {"run": run.pk, "step": step, "loss": loss}},
            )
        return run

    ours, theirs = run_with_losses(tenant, [0.5, 0.25, 0.125]), run_with_losses(other_tenant, [9.0])
    client.force_login(MembershipFactory(tenant=tenant, role=Role.VIEWER).user)
    content = client.get("/").content.decode()
    figures = json.loads(
        content.split('id="overview-figures" type="application/json">')[1].split("</script>")[0]
    )
    live = json.loads(content.split('id="overview-live" type="application/json">')[1].split("</script>")[0])
    traces = {trace["name"]: trace for trace in figures["loss"]["data"]}
    assert set(traces) == {f"online run {ours.pk}"}  # not the other tenant's run
    assert traces[f"online run {ours.pk}"]["x"] == [1, 2, 3]
    assert traces[f"online run {ours.pk}"]["y"] == [
        0.5,
        0.25,
        0.125,
    ]
    assert live["online_streams"] == {str(ours.pk): f"training.online-{ours.pk}"}
    assert theirs.pk != ours.pk


@pytest.mark.django_db
def test_home_page_of_an_empty_tenant_still_draws(tenant, client):
    client.force_login(MembershipFactory(tenant=tenant, role=Role.ANNOTATOR).user)
    response = client.get("/")
    assert response.status_code == 200
    assert b"No release yet." in response.content
    assert b'data-live="off"' in response.content  # WSGI: no WebSockets, so the page does not try


def test_traffic_points_group_a_batch_by_tenant():
    records = [
        {"tenant_id": 1, "latency_ms": 12, "error": ""},
        {"tenant_id": 2, "latency_ms": 7, "error": "x"},
        {"tenant_id": 1, "latency_ms": 30, "error": "", "aborted": True},
        {"tenant_id": 1, "latency_ms": 1, "kind": "tool_call"},
    ]
    points = traffic_points(records)
    assert {tenant: (p["requests"], p["errors"], p["latencies_ms"]) for tenant, p in points.items()} == {
        1: (2, 1, [12, 30]),
        2: (1, 1, [7]),
    }
    assert points[1]["minute"].endswith(":00")
    assert len(points[1]["minute"]) == 19


def _headers(user):
    client = Client()
    client.force_login(user)
    return [
        (b"origin", b"http://localhost"),
        (b"host", b"localhost"),
        (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()),
    ]


def away_from_a_minute_end(margin: float = 10.0) -> None:
    """Outcome points cover the current minute only: a test that stores rewards and then ticks sleeps into the
    next minute when fewer than `margin` seconds of this one are left, so both happen in one minute."""
    now = timezone.now()
    left = 60 - now.second - now.microsecond / 1e6
    if left < margin:
        time.sleep(left + 0.2)


async def _subscribed(user, stream):
    socket = WebsocketCommunicator(application, "/ws/live/acme/", headers=await sync_to_async(_headers)(user))
    assert (await socket.connect())[0]
    await socket.send_json_to({"subscribe": stream})
    assert await socket.receive_json_from(timeout=5) == {"subscribed": stream}
    return socket


@pytest.mark.django_db(transaction=True)
async def test_flushed_batch_reaches_the_tenants_page_and_the_counters(tenant, other_tenant):
    user = await sync_to_async(lambda: MembershipFactory(tenant=tenant, role=Role.VIEWER).user)()
    socket = await _subscribed(user, "gateway.traffic")
    labels = {"tenant_id": str(tenant.pk), "endpoint": "chat.completions", "outcome": "ok"}
    before = await sync_to_async(sample)("areal_gateway_requests_total", **labels)

    gateway_steps_recorded(
        [
            gateway_step(tenant, "s", latency_ms=25),
            gateway_step(other_tenant, "t"),
            gateway_step(tenant, "s", latency_ms=35),
        ]
    )  # on the event loop, as the flusher does

    message = await socket.receive_json_from(timeout=5)
    assert message["stream"] == "gateway.traffic"
    assert (message["payload"]["requests"], message["payload"]["latencies_ms"]) == (2, [25, 35])
    assert await socket.receive_nothing(timeout=0.3)
    assert await sync_to_async(sample)("areal_gateway_requests_total", **labels) == before + 2
    await socket.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_outcome_tick_publishes_the_current_minute_per_tenant(tenant, other_tenant):
    user = await sync_to_async(lambda: MembershipFactory(tenant=tenant, role=Role.VIEWER).user)()
    socket = await _subscribed(user, "overview.outcomes")

    @sync_to_async
    def rewards_and_tick():
        away_from_a_minute_end()
        trajectory = TrajectoryFactory(tenant=tenant)
        RewardFactory(trajectory=trajectory, value=1.0, source="environment")
        RewardFactory(trajectory=trajectory, value=0.0, source="environment")
        RewardFactory(trajectory=TrajectoryFactory(tenant=other_tenant), value=1.0, source="environment")
        return overview_tick()

    assert await rewards_and_tick() == 2
    payload = (await socket.receive_json_from(timeout=5))["payload"]
    assert (payload["rewards"], payload["reward_mean"], payload["success_rate"]) == (2, 0.5, 0.5)
    assert await socket.receive_nothing(timeout=0.3)
    await socket.disconnect()
