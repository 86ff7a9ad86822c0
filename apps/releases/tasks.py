import logging

from celery import shared_task

from areal_web.queues import Queue

logger = logging.getLogger(__name__)


@shared_task(name="releases.analyze", queue=Queue.DEFAULT.value, ignore_result=True, max_retries=0)
def analyze_release(release_id: int) -> str:
    """One analysis tick of one release (see apps.releases.services.release_analyze). Safe to run twice at
    once: every status move is a conditional update."""
    from apps.releases.models import Release
    from apps.releases.services import release_analyze

    release = Release.objects.select_related("tenant").filter(pk=release_id).first()
    if release is None:
        return "missing"
    return release_analyze(tenant=release.tenant, release_id=release_id).status


@shared_task(name="releases.analyze_all", queue=Queue.DEFAULT.value, ignore_result=True, max_retries=0)
def analyze_all_releases() -> int:
    """Beat: queues a tick for every release in evaluation, canary, pause or awaiting approval."""
    from apps.releases.selectors import dangerously_analyzable_release_ids

    ids = dangerously_analyzable_release_ids()
    for _tenant_id, release_id in ids:
        analyze_release.delay(release_id)
    return len(ids)
