"""Celery tasks of apps.releases: analysis ticks (one release, or every analysable one from beat)."""

from celery import shared_task

from apps.releases.analysis import release_analyze
from apps.releases.selectors import dangerously_analyzable_release_ids, dangerously_release_tenant


@shared_task(name="releases.analyze", ignore_result=True, max_retries=0)
def analyze_release(release_id: int) -> str:
    """One analysis tick of one release (see apps.releases.analysis.release_analyze). Safe to run twice at
    once: every status move is a conditional update."""
    tenant = dangerously_release_tenant(release_id=release_id)
    if tenant is None:
        return "missing"
    return release_analyze(tenant=tenant, release_id=release_id).status


@shared_task(name="releases.analyze_all", ignore_result=True, max_retries=0)
def analyze_all_releases() -> int:
    """Beat: queues a tick for every release in evaluation, canary, pause or awaiting approval (duplicates
    are harmless: see analyze_release)."""
    ids = dangerously_analyzable_release_ids()
    for _tenant_id, release_id in ids:
        analyze_release.delay(release_id)
    return len(ids)
