"""Console pages: the tenant's inference backends (register, check now, drain and return to rotation, provider
settings: kind, capability flags and credential)."""

from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from apps.console.access import console_page
from apps.console.pages import console_action
from apps.inference import forms, selectors, services
from apps.inference.models import BackendState
from apps.tenants.permissions import Action, role_can

CREDENTIALS_ARE_ADMINS = "Only an admin may set or clear a backend's credential."


@console_page(Action.BACKEND_VIEW)
def backends(request):
    can_manage = role_can(request.membership.role, Action.BACKEND_MANAGE)
    form = forms.BackendRegisterForm(request.POST or None)
    if not _can_manage_credentials(request):
        del form.fields["credential"]  # only an admin sets a credential
    if request.method == "POST":
        if not can_manage:
            return render(request, "console/forbidden.html", {"action": Action.BACKEND_MANAGE}, status=403)
        if form.is_valid():
            backend = console_action(
                request,
                lambda: services.backend_register_and_check(
                    tenant=request.tenant, actor=request.actor, **form.registration()
                ),
            )
            if backend:
                messages.success(request, f"Registered {backend.name}: {backend.state}.")
                return redirect("console:backends")
    backend_rows = list(selectors.backend_list(tenant=request.tenant))
    return render(
        request,
        "console/backends.html",
        {
            "backends": backend_rows,
            "rows": [  # each backend with its provider settings form (for those who may manage backends)
                (
                    backend,
                    forms.BackendProviderForm(
                        initial={"kind": backend.kind}, auto_id=f"id_backend{backend.pk}_%s"
                    )
                    if can_manage
                    else None,
                )
                for backend in backend_rows
            ],
            "form": form,
            "can_manage": can_manage,
            "can_manage_credentials": _can_manage_credentials(request),
        },
        status=422 if request.method == "POST" else 200,
    )


def _can_manage_credentials(request) -> bool:
    return role_can(request.membership.role, Action.BACKEND_CREDENTIAL_MANAGE)


@require_POST
@console_page(Action.BACKEND_MANAGE)
def backend_provider(request, backend_id):
    """A backend's kind, capability flags and credential (set, rotated or cleared: admins only)."""
    backend = selectors.backend_get(tenant=request.tenant, backend_id=backend_id)  # another tenant's: 404
    form = forms.BackendProviderForm(request.POST)
    if not form.is_valid():
        problems = "; ".join(f"{field}: {' '.join(errors)}" for field, errors in form.errors.items())
        messages.error(request, f"{backend.name}: {problems}")
    elif form.touches_credential() and not _can_manage_credentials(request):
        messages.error(request, CREDENTIALS_ARE_ADMINS)
    elif console_action(
        request,
        lambda: services.backend_update(
            tenant=request.tenant, actor=request.actor, backend_id=backend.pk, changes=form.changes()
        ),
    ):
        messages.success(request, f"Saved {backend.name}'s provider settings.")
    return redirect("console:backends")


@require_POST
@console_page(Action.BACKEND_MANAGE)
def backend_check(request, backend_id):
    backend = selectors.backend_get(tenant=request.tenant, backend_id=backend_id)
    backend = services.backend_check(backend=backend)
    messages.success(
        request,
        f"{backend.name} is {backend.state}{': ' + backend.last_error if backend.last_error else ''}.",
    )
    return redirect("console:backends")


@require_POST
@console_page(Action.BACKEND_MANAGE)
def backend_drain(request, backend_id):
    selectors.backend_get(tenant=request.tenant, backend_id=backend_id)  # another tenant's: 404
    draining = request.POST.get("drain") == "1"
    state = BackendState.DRAINING if draining else BackendState.UNKNOWN
    if console_action(
        request,
        lambda: services.backend_update(
            tenant=request.tenant, actor=request.actor, backend_id=backend_id, changes={"state": state}
        ),
    ):
        messages.success(
            request, "Draining: no new sessions." if draining else "Back in rotation after the next check."
        )
    return redirect("console:backends")
