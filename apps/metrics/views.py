"""GET /metrics: Prometheus text exposition. Protected by AREAL_METRICS_TOKEN (a bearer token) when set;
without it only loopback clients are answered (403 otherwise), and in production (where
AREAL_METRICS_ALLOW_LOOPBACK is off) nobody."""

import hmac
import ipaddress
from pathlib import Path

from django.conf import settings
from django.http import HttpResponse
from django.views.decorators.http import require_GET

from apps.metrics.exposition import CONTENT_TYPE, ScrapedGauge, ScrapedGauges, render
from areal_web.queues import Queue


def queue_depths() -> dict[tuple[str], int]:
    """Messages waiting in each Celery queue: LLEN on Redis, message files of the embedded broker."""
    names = [queue.value for queue in Queue] + (
        [settings.AREAL_TRAINING_QUEUE] if settings.AREAL_TRAINING_QUEUE not in set(Queue) else []
    )
    if settings.REDIS_URL:
        import redis

        client = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=2)
        prefix = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {}).get("global_keyprefix", "")
        return {(name,): client.llen(prefix + name) for name in names}
    folder = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"])
    counts = dict.fromkeys(names, 0)
    for path in folder.iterdir():
        queue = path.name.partition(".")[2].removesuffix(".msg")  # <millis>_<uuid>.<queue>.msg
        if queue in counts:
            counts[queue] += 1
    return {(name,): count for name, count in counts.items()}


def _steps():
    from apps.trajectories.selectors import dangerously_steps_recorded_per_tenant

    return {(slug,): total for slug, total in dangerously_steps_recorded_per_tenant().items()}


def _jobs():
    from apps.training.selectors import dangerously_training_job_counts

    return dangerously_training_job_counts()


def _releases():
    from apps.releases.selectors import dangerously_release_counts

    return dangerously_release_counts()


SCRAPED = ScrapedGauges(
    (
        ScrapedGauge(
            "areal_steps_recorded", "Steps recorded in the database, by tenant.", ("tenant",), _steps
        ),
        ScrapedGauge(
            "areal_celery_queue_depth", "Messages waiting in each Celery queue.", ("queue",), queue_depths
        ),
        ScrapedGauge(
            "areal_training_jobs", "Training jobs by tenant and status.", ("tenant", "status"), _jobs
        ),
        ScrapedGauge("areal_releases", "Releases by tenant and status.", ("tenant", "status"), _releases),
    )
)


def _allowed(request) -> bool:
    token = settings.AREAL_METRICS_TOKEN
    if token:
        given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        return hmac.compare_digest(given.encode(), token.encode())
    if not settings.AREAL_METRICS_ALLOW_LOOPBACK:
        return False
    try:
        return ipaddress.ip_address(request.META.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        return False


@require_GET
def metrics(request):
    if not _allowed(request):
        return HttpResponse(
            "forbidden: set AREAL_METRICS_TOKEN and send it as a bearer token, or scrape from the loopback\n",
            status=403,
            content_type="text/plain",
        )
    return HttpResponse(render(SCRAPED), content_type=CONTENT_TYPE)
