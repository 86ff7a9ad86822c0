from django.contrib import messages
from django.contrib.auth import login, logout
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from apps.audit.selectors import audit_event_list
from apps.console.access import console_page
from apps.core.login_throttle import ThrottledAuthenticationForm, login_throttled
from apps.loop.overview import overview_context
from apps.tenants import selectors
from apps.tenants.api import TENANT_SESSION_KEY
from apps.tenants.permissions import Action, role_can
from apps.trajectories.selectors import trajectory_list


def login_view(request):
    """Sign-in; every attempt is counted by the throttling backend (apps/core/login_throttle.py)."""
    form = ThrottledAuthenticationForm(request, data=request.POST or None)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            login(request, form.get_user())
            target = request.POST.get("next") or request.GET.get("next") or ""
            if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
                target = "console:home"
            return redirect(target)
        if login_throttled(request):
            status = 429
    return render(
        request, "console/login.html", {"form": form, "next": request.GET.get("next", "")}, status=status
    )


@require_POST
def logout_view(request):
    logout(request)
    return redirect("console:login")


@require_POST
@console_page(Action.TENANT_VIEW)
def tenant_switch(request):
    slug = request.POST.get("tenant", "")
    if selectors.membership_for_user(user=request.user, tenant_slug=slug) is not None:
        request.session[TENANT_SESSION_KEY] = slug
    else:
        messages.error(request, "You are not a member of that tenant.")
    return redirect("console:home")


@console_page(Action.TENANT_VIEW)
def home(request):
    context = {
        "member_count": selectors.membership_list(tenant=request.tenant).count(),
        "has_traffic": trajectory_list(tenant=request.tenant).exists(),
    }
    if role_can(request.membership.role, Action.API_KEY_VIEW):
        context["active_key_count"] = selectors.api_key_list(
            tenant=request.tenant, include_inactive=False
        ).count()
    if role_can(request.membership.role, Action.AUDIT_VIEW):
        context["recent_events"] = audit_event_list(tenant=request.tenant)[:8]
    context.update(overview_context(tenant=request.tenant))  # live charts: apps/loop/overview.py
    return render(request, "console/home.html", context)
