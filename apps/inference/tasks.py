from celery import shared_task


@shared_task(name="inference.check_backends", ignore_result=True)
def check_backends() -> dict:
    """Beat runs this every 15 s: probes every registered backend of every tenant and records up/down.
    Idempotent (a probe result simply overwrites the last); a down backend gets no new sessions."""
    from apps.inference.selectors import dangerously_backend_list_all_tenants
    from apps.inference.services import backend_check

    states = {}
    for backend in dangerously_backend_list_all_tenants().only("id", "base_url", "kind"):
        checked = backend_check(backend=backend)  # the address is checked against the allow-list first
        if checked is not None:
            states[backend.pk] = checked.last_error == ""  # healthy (a draining backend keeps its state)
    return states
