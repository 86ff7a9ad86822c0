from celery import shared_task


@shared_task(name="inference.check_backends", ignore_result=True)
def check_backends() -> dict:
    """Beat runs this every 15 s: probes every registered backend of every tenant and records up/down.
    Idempotent (a probe result simply overwrites the last); a down backend gets no new sessions."""
    from apps.inference.health import backend_probe
    from apps.inference.selectors import dangerously_backend_list_all_tenants
    from apps.inference.services import backend_record_health

    states = {}
    for backend_id, base_url, kind in dangerously_backend_list_all_tenants().values_list("id", "base_url", "kind"):
        healthy, error = backend_probe(base_url=base_url, kind=kind)
        backend_record_health(backend_id=backend_id, healthy=healthy, error=error)
        states[backend_id] = healthy
    return states
