from celery import shared_task


@shared_task(name="metrics.overview_tick", ignore_result=True)
def overview_tick() -> int:
    """Publishes each tenant's current-minute reward and success point to its overview page. Idempotent:
    a repeated tick sends the same minute's point again, which the page replaces in place."""
    from apps.metrics.outcomes import overview_tick as tick

    return tick()
