"""Tenant and role resolution for console pages: the console's counterpart of `TenantApi.initial`."""

from functools import wraps

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import render

from apps.audit.services import Actor
from apps.core.errors import NotFound
from apps.tenants.api import TENANT_SESSION_KEY, tenant_resolve_for_user
from apps.tenants.permissions import Action, role_can


def console_page(action: Action):
    """Signs the user in if needed, resolves the current tenant and membership onto the request
    (`request.tenant`, `request.membership`, `request.actor`) and checks the role may take `action`."""

    def decorator(view):
        @login_required
        @wraps(view)
        def wrapper(request, *args, **kwargs):
            try:
                tenant, membership = tenant_resolve_for_user(request=request, user=request.user)
            except NotFound:
                if request.session.pop(TENANT_SESSION_KEY, None) is None:
                    return render(request, "console/no_tenant.html", status=404)
                tenant, membership = tenant_resolve_for_user(request=request, user=request.user)
            request.tenant, request.membership = tenant, membership
            request.actor = Actor.user(request.user)
            if not role_can(membership.role, action):
                return render(request, "console/forbidden.html", {"action": action}, status=403)
            try:
                return view(request, *args, **kwargs)
            except NotFound as missing:  # another tenant's object looks exactly like a missing one
                raise Http404(missing.message) from None

        return wrapper

    return decorator
