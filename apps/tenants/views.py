"""Console pages: members (add, change role, remove), API keys (create with the key shown once, rotate with a
chosen grace period, revoke) and the tenant's policy (read-only for roles that may not edit it)."""

from django.contrib import messages
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from apps.console.access import console_page
from apps.console.pages import PAGE_SIZE, console_action
from apps.tenants import forms, selectors, services
from apps.tenants.permissions import Action, role_can
from apps.trajectories.retention import retention_summary


@console_page(Action.MEMBER_VIEW)
def members(request):
    can_manage = role_can(request.membership.role, Action.MEMBER_MANAGE)
    form = forms.MemberAddForm(request.POST or None)
    if request.method == "POST":
        if not can_manage:
            return render(request, "console/forbidden.html", {"action": Action.MEMBER_MANAGE}, status=403)
        if form.is_valid():
            added = console_action(
                request,
                lambda: services.membership_add(
                    tenant=request.tenant,
                    actor=request.actor,
                    user_identifier=form.cleaned_data["user"],
                    role=form.cleaned_data["role"],
                ),
            )
            if added:
                messages.success(request, f"Added {added.user.username} as {added.role}.")
                return redirect("console:members")
    return render(
        request,
        "console/members.html",
        {
            "memberships": selectors.membership_list(tenant=request.tenant),
            "form": form,
            "role_form": forms.MemberRoleForm(),
            "can_manage": can_manage,
        },
    )


@require_POST
@console_page(Action.MEMBER_MANAGE)
def member_role(request, membership_id):
    selectors.membership_get(tenant=request.tenant, membership_id=membership_id)  # another tenant's: 404
    form = forms.MemberRoleForm(request.POST)
    if form.is_valid() and console_action(
        request,
        lambda: services.membership_change_role(
            tenant=request.tenant,
            actor=request.actor,
            membership_id=membership_id,
            role=form.cleaned_data["role"],
        ),
    ):
        messages.success(request, "Role changed.")
    return redirect("console:members")


@require_POST
@console_page(Action.MEMBER_MANAGE)
def member_remove(request, membership_id):
    selectors.membership_get(tenant=request.tenant, membership_id=membership_id)  # another tenant's: 404
    console_action(
        request,
        lambda: services.membership_remove(
            tenant=request.tenant, actor=request.actor, membership_id=membership_id
        ),
        success="Member removed.",
    )
    return redirect("console:members")


@console_page(Action.API_KEY_VIEW)
def keys(request):
    form = forms.ApiKeyCreateForm(request.POST or None)
    if (
        request.method == "POST"
        and role_can(request.membership.role, Action.API_KEY_MANAGE)
        and form.is_valid()
    ):
        created = console_action(
            request,
            lambda: services.api_key_create(
                tenant=request.tenant, actor=request.actor, created_by=request.user, **form.cleaned_data
            ),
        )
        if created:
            key, raw = created
            return render(request, "console/key_created.html", {"key": key, "raw_key": raw})
    page = Paginator(selectors.api_key_list(tenant=request.tenant), PAGE_SIZE).get_page(
        request.GET.get("page")
    )
    now = timezone.now()
    rows = [(key, key.status_at(now)) for key in page]
    return render(
        request,
        "console/keys.html",
        {
            "form": form,
            "rows": rows,
            "page": page,
            "rotate_form": forms.ApiKeyRotateForm(),
            "can_manage": role_can(request.membership.role, Action.API_KEY_MANAGE),
        },
    )


@require_POST
@console_page(Action.API_KEY_MANAGE)
def key_revoke(request, key_id):
    selectors.api_key_get(tenant=request.tenant, key_id=key_id)  # another tenant's: 404
    key = console_action(
        request, lambda: services.api_key_revoke(tenant=request.tenant, actor=request.actor, key_id=key_id)
    )
    if key:
        messages.success(request, f"Revoked {key.prefix}…; requests with it are now refused.")
    return redirect("console:keys")


@require_POST
@console_page(Action.API_KEY_MANAGE)
def key_rotate(request, key_id):
    selectors.api_key_get(tenant=request.tenant, key_id=key_id)  # another tenant's: 404
    form = forms.ApiKeyRotateForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose how long the old key stays valid.")
        return redirect("console:keys")
    rotated = console_action(
        request,
        lambda: services.api_key_rotate(
            tenant=request.tenant,
            actor=request.actor,
            key_id=key_id,
            grace_seconds=form.cleaned_data["grace_seconds"],
            created_by=request.user,
        ),
    )
    if not rotated:
        return redirect("console:keys")
    key, raw = rotated
    return render(request, "console/key_created.html", {"key": key, "raw_key": raw, "rotated": True})


@console_page(Action.POLICY_VIEW)
def policy(request):
    current = request.tenant.policy
    can_edit = role_can(request.membership.role, Action.POLICY_EDIT)
    initial = {field: getattr(current, field) for field in services.POLICY_FIELDS}
    initial["allowed_models"] = ", ".join(current.allowed_models)
    form = forms.PolicyForm(request.POST or None, initial=initial)
    if request.method == "POST":
        if not can_edit:
            return render(request, "console/forbidden.html", {"action": Action.POLICY_EDIT}, status=403)
        if form.is_valid() and console_action(
            request,
            lambda: services.policy_update(
                tenant=request.tenant, actor=request.actor, changes=form.cleaned_data
            ),
        ):
            messages.success(request, "Policy saved.")
            return redirect("console:policy")
    if not can_edit:
        for field in form.fields.values():
            field.disabled = True
    return render(
        request,
        "console/policy.html",
        {"form": form, "can_edit": can_edit, "retention": retention_summary(tenant=request.tenant)},
    )
