"""The tenant overview (the console's home page): server-side Plotly figures from the owning apps' selectors
(handed to the page with json_script) and the streams the page listens to.

Charts and the live streams that extend them:
- traffic (requests per minute) and latency (p50/p95 per minute): "gateway.traffic", one point per flushed
  gateway batch (apps.metrics.traffic);
- outcomes (reward mean and success rate per minute, production-alias moves marked): "overview.outcomes",
  published by the `metrics.overview_tick` task on a worker (apps.loop.outcomes);
- on traffic and outcomes, each release that served in the window as a band from its canary's start to its end
  (or now), labelled by what it released and how it went ("v3 canary 25 %", "v3 promoted");
- loss per training job and online run: "training.jobs" announces both, "training.job-<id>" and
  "training.online-<id>" carry their steps;
- canary vs baseline: "release-<id>" of the release shown (apps.releases.figures).
"""

import json
from datetime import timedelta

import plotly.graph_objects as go
from django.db.models import Q
from django.utils import timezone

from apps.metrics.publish import OUTCOMES_STREAM, TRAFFIC_STREAM, chart_time
from apps.releases import selectors as releases
from apps.releases.choices import SERVING_STATUSES, ReleaseStatus
from apps.releases.figures import release_figures
from apps.releases.services import release_stream
from apps.rewards import selectors as rewards
from apps.training import online
from apps.training import selectors as training
from apps.training.choices import OnlineRunStatus
from apps.training.jobs import JOBS_STREAM, training_job_stream
from apps.trajectories import selectors as trajectories

WINDOW = timedelta(hours=3)
JOBS_SHOWN = 5
RELEASES_MARKED = 20  # the newest releases banded on the charts
LAYOUT = {"height": 280, "margin": {"l": 50, "r": 50, "t": 40, "b": 30}, "legend": {"orientation": "h"}}


def _figure(figure: go.Figure) -> dict:
    return json.loads(figure.to_json())


def time_axis(x: list[str]) -> dict:
    """A date axis from the first point (or 30 minutes ago) to 5 minutes ahead; the page moves its end on as
    live points pass it (a lone point would otherwise get a millisecond-wide axis)."""
    now = timezone.now()
    start = min([*x, chart_time(now - timedelta(minutes=30))])
    return {
        "type": "date",
        "range": [start, chart_time(now + timedelta(minutes=5))],
        "title": {"text": "UTC"},
    }


def version_markers(moves) -> tuple[list[dict], list[dict]]:
    """Vertical lines and labels at each production-alias move (a promotion or a rollback)."""
    shapes, annotations = [], []
    for move in moves:
        at = chart_time(move.moved_at)
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": at,
                "x1": at,
                "y0": 0,
                "y1": 1,
                "line": {"color": "#868e96", "dash": "dot", "width": 1},
            }
        )
        annotations.append(
            {
                "x": at,
                "xref": "x",
                "y": 1,
                "yref": "paper",
                "showarrow": False,
                "yanchor": "bottom",
                "text": f"{move.name} v{move.to_version.number}",
                "font": {"size": 10},
            }
        )
    return shapes, annotations


# A release's band on the overview charts, by how it stands or ended: (fill, words after the version).
RELEASE_BANDS = {
    ReleaseStatus.CANARY: ("rgba(217, 72, 15, 0.10)", "canary"),
    ReleaseStatus.PAUSED: ("rgba(245, 159, 0, 0.14)", "paused"),
    ReleaseStatus.AWAITING_APPROVAL: ("rgba(245, 159, 0, 0.14)", "awaiting approval"),
    ReleaseStatus.PROMOTED: ("rgba(47, 158, 68, 0.10)", "promoted"),
    ReleaseStatus.ROLLED_BACK: ("rgba(192, 54, 44, 0.12)", "rolled back"),
    ReleaseStatus.ABORTED: ("rgba(134, 142, 150, 0.12)", "aborted"),
}


def release_band_words(release) -> str:
    """A release on the overview by what it released and how it stands: "v3 canary 25 %", "v3 promoted"."""
    _, words = RELEASE_BANDS.get(release.status, ("", release.status.replace("_", " ")))
    if release.status == ReleaseStatus.CANARY and release.stage_index >= 0:
        words += f" {release.stage_percent:g} %"
    return f"v{release.candidate.number} {words}"


def release_bands(releases, *, since, now=None) -> tuple[list[dict], list[dict]]:
    """Shaded bands and labels for each release whose candidate took live traffic in the window: from its
    canary's start (a release put on canary without one: its creation) to its end, or now while it runs.
    A release that never reached its canary (a draft, one stopped by its offline evaluation) has none."""
    now = now or timezone.now()
    shapes, annotations = [], []
    for release in releases:
        started = release.canary_started_at or (
            release.created_at if release.status in SERVING_STATUSES else None
        )
        ended = release.finished_at or (now if release.status in SERVING_STATUSES else None)
        if started is None or ended is None or ended < since:
            continue
        start = chart_time(max(started, since))
        fill, _ = RELEASE_BANDS.get(release.status, ("rgba(134, 142, 150, 0.12)", ""))
        shapes.append(
            {
                "type": "rect",
                "xref": "x",
                "yref": "paper",
                "x0": start,
                "x1": chart_time(ended),
                "y0": 0,
                "y1": 1,
                "fillcolor": fill,
                "line": {"width": 0},
                "layer": "below",
                "name": f"release-{release.pk}",
            }
        )
        annotations.append(
            {
                "x": start,
                "xref": "x",
                "y": 0.98,
                "yref": "paper",
                "xanchor": "left",
                "yanchor": "top",
                "showarrow": False,
                "text": release_band_words(release),
                "font": {"size": 10},
            }
        )
    return shapes, annotations


def traffic_figures(minutes: list[dict], markers) -> dict[str, dict]:
    x = [chart_time(row["minute"]) for row in minutes]
    traffic = go.Figure(
        [
            go.Scatter(x=x, y=[row[key] for row in minutes], name=key, mode="lines+markers", fill="tozeroy")
            for key in ("requests", "errors")
        ]
    )
    traffic.update_layout(
        title="Gateway requests per minute",
        xaxis=time_axis(x),
        shapes=markers[0],
        annotations=markers[1],
        **LAYOUT,
    )
    latency = go.Figure(
        [
            go.Scatter(x=x, y=[row[key] for row in minutes], name=name, mode="lines+markers")
            for key, name in (("p50_ms", "p50"), ("p95_ms", "p95"))
        ]
    )
    latency.update_layout(title="Gateway latency (ms)", xaxis=time_axis(x), **LAYOUT)
    return {"traffic": _figure(traffic), "latency": _figure(latency)}


def outcomes_figure(minutes: list[dict], markers) -> dict:
    x = [chart_time(row["minute"]) for row in minutes]
    figure = go.Figure(
        [
            go.Scatter(
                x=x, y=[row["reward_mean"] for row in minutes], name="reward mean", mode="lines+markers"
            ),
            go.Scatter(
                x=x,
                y=[row["success_rate"] for row in minutes],
                name="success rate",
                mode="lines+markers",
                yaxis="y2",
            ),
        ]
    )
    figure.update_layout(
        title="Reward and task success per minute (releases and production versions marked)",
        yaxis2={"overlaying": "y", "side": "right", "range": [0, 1], "title": {"text": "success"}},
        xaxis=time_axis(x),
        shapes=markers[0],
        annotations=markers[1],
        **LAYOUT,
    )
    return _figure(figure)


def loss_figure(series: list[tuple[str, list[dict]]]) -> dict:
    """One trace per job ("job <id>") or online run ("online run <id>"), loss by step; the page adds traces
    for new ones."""
    figure = go.Figure(
        [
            go.Scatter(
                x=[row["step"] for row in rows],
                y=[row.get("loss") for row in rows],
                name=name,
                mode="lines+markers",
            )
            for name, rows in series
        ]
    )
    figure.update_layout(title="Training loss", xaxis={"title": {"text": "step"}}, **LAYOUT)
    return _figure(figure)


def overview_context(*, tenant) -> dict:
    """Everything the overview page draws and listens to, read through the owning apps' selectors."""
    since = timezone.now() - WINDOW
    moves = version_markers(training.alias_history(tenant=tenant, alias="production", since=since))
    served = (
        releases.release_list(tenant=tenant)
        .exclude(status=ReleaseStatus.DRAFT)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gte=since))[:RELEASES_MARKED]
    )
    bands = release_bands(served, since=since)
    markers = (bands[0] + moves[0], bands[1] + moves[1])
    jobs = list(training.training_job_list(tenant=tenant)[:JOBS_SHOWN])[::-1]
    runs = list(online.online_run_list(tenant=tenant)[:JOBS_SHOWN])[::-1]
    series = [(f"job {job.pk}", training.training_job_metrics(tenant=tenant, job_id=job.pk)) for job in jobs]
    series += [
        (f"online run {run.pk}", online.online_run_losses(tenant=tenant, run_id=run.pk)) for run in runs
    ]
    release = releases.release_for_dashboard(tenant=tenant)
    figures = {
        **traffic_figures(trajectories.step_traffic_per_minute(tenant=tenant, since=since), markers),
        "outcomes": outcomes_figure(rewards.reward_outcomes_per_minute(tenant=tenant, since=since), markers),
        "loss": loss_figure(series),
    }
    release_charts = (
        release_figures(releases.release_analyses(tenant=tenant, release_id=release.pk)) if release else {}
    )
    live = {
        "tenant": tenant.slug,
        "traffic": TRAFFIC_STREAM,
        "outcomes": OUTCOMES_STREAM,
        "jobs": JOBS_STREAM,
        "job_streams": {str(job.pk): training_job_stream(job.pk) for job in jobs if not job.is_final},
        "online_streams": {
            str(run.pk): online.online_run_stream(run.pk)
            for run in runs
            if run.status == OnlineRunStatus.RUNNING
        },
        "release": release_stream(release.pk) if release else None,
    }
    return {
        "overview_figures": figures,
        "release_figures": release_charts,
        "overview_live": live,
        "overview_release": release,
        "overview_jobs": jobs,
    }
