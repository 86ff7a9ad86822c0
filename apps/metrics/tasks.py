"""Celery tasks of apps.metrics: the overview's live outcome point (beat)."""

from celery import shared_task

from apps.loop import outcomes


@shared_task(name="metrics.overview_tick", ignore_result=True)
def overview_tick() -> int:
    """Beat (every AREAL_OVERVIEW_TICK_SECONDS): publishes each tenant's current-minute reward and success
    point to its overview page. Idempotent: a repeated tick sends the same minute's point again, which the page
    replaces in place."""
    return outcomes.overview_tick()
