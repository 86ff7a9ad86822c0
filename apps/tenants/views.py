"""Console pages: members (invite by email or username, change role, remove; an invited person's set-a-password
page), a new tenant (staff), API keys (create with the key shown once, rotate with a
chosen grace period, revoke) and the tenant's policy (read-only for roles that may not edit it)."""

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from apps.audit.services import Actor
from apps.console.access import console_page
from apps.console.pages import PAGE_SIZE, console_action
from apps.core.errors import DomainError
from apps.tenants import forms, invitations, selectors, services
from apps.tenants.api import TENANT_SESSION_KEY
from apps.tenants.permissions import Action, role_can
from apps.trajectories.retention import retention_summary


@console_page(Action.MEMBER_VIEW)
def members(request):
    """Members, their roles, and the invitation form (an email or a username with a role)."""
    can_manage = role_can(request.membership.role, Action.MEMBER_MANAGE)
    form = forms.MemberAddForm(request.POST or None)
    if request.method == "POST":
        if not can_manage:
            return render(request, "console/forbidden.html", {"action": Action.MEMBER_MANAGE}, status=403)
        if form.is_valid():
            invitation = console_action(
                request,
                lambda: invitations.member_invite(
                    tenant=request.tenant,
                    actor=request.actor,
                    identifier=form.cleaned_data["user"],
                    role=form.cleaned_data["role"],
                ),
            )
            if invitation and invitation.needs_password:
                return _invited_page(request, invitation.membership)
            if invitation:
                membership = invitation.membership
                messages.success(request, f"Added {membership.user.username} as {membership.role}.")
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
        status=400 if form.errors else 200,
    )


def _invited_page(request, membership):
    uidb64, token = invitations.invite_link_parts(membership.user)
    link = request.build_absolute_uri(reverse("console:invitation", args=[uidb64, token]))
    return render(request, "console/member_invited.html", {"membership": membership, "link": link})


@require_POST
@console_page(Action.MEMBER_MANAGE)
def member_invite_link(request, membership_id):
    """The set-a-password link again, for a member who has not set one yet."""
    membership = selectors.membership_get(tenant=request.tenant, membership_id=membership_id)
    if membership.user.has_usable_password():
        messages.error(request, f"{membership.user.username} has a password already.")
        return redirect("console:members")
    return _invited_page(request, membership)


def invitation(request, uidb64, token):
    """An invited person sets a first password here (no sign-in needed: the link is the proof), then is
    signed in. A used, expired or altered link says so."""
    user = invitations.invited_user(uidb64=uidb64, token=token)
    if user is None:
        return render(request, "console/invitation.html", {"expired": True}, status=404)
    form = forms.InvitationAcceptForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            invitations.invitation_accept(user=user, password=form.cleaned_data["password"])
        except DomainError as error:
            for problem in error.fields.get("password") or [error.message]:
                form.add_error("password", problem)
        else:
            login(request, user, backend=settings.AUTHENTICATION_BACKENDS[0])
            messages.success(request, "Your password is set. Welcome.")
            return redirect("console:home")
    return render(
        request,
        "console/invitation.html",
        {"form": form, "invited": user},
        status=400 if form.errors else 200,
    )


@login_required
def tenant_new(request):
    """A staff user creates a tenant and names its first admin (themself by default)."""
    if not request.user.is_staff:
        return render(request, "console/forbidden.html", {"action": "tenant.create"}, status=403)
    form = forms.TenantCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            tenant, invitation = invitations.tenant_create_with_admin(
                slug=data["slug"],
                name=data["name"],
                admin_identifier=data["admin"] or request.user.get_username(),
                actor=Actor.user(request.user),
            )
        except DomainError as error:
            form.add_error("slug" if error.code == "tenant_exists" else None, error.message)
        else:
            admin = invitation.membership.user
            if admin == request.user:
                request.session[TENANT_SESSION_KEY] = tenant.slug
                messages.success(request, f"Created {tenant.name}; you are its admin.")
                return redirect("console:members")
            messages.success(request, f"Created {tenant.name} with {admin.username} as its admin.")
            if invitation.needs_password:
                return _invited_page(request, invitation.membership)
            return redirect("console:home")
    return render(request, "console/tenant_new.html", {"form": form}, status=400 if form.errors else 200)


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


def _gateway_url(request) -> str:
    """The gateway's address as this request reached the console (one server answers both)."""
    return request.build_absolute_uri("/").rstrip("/")


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
            return render(
                request,
                "console/key_created.html",
                {"key": key, "raw_key": raw, "gateway_url": _gateway_url(request)},
            )
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
    return render(
        request,
        "console/key_created.html",
        {"key": key, "raw_key": raw, "rotated": True, "gateway_url": _gateway_url(request)},
    )


@console_page(Action.POLICY_VIEW)
def policy(request):
    current = request.tenant.policy
    can_edit = role_can(request.membership.role, Action.POLICY_EDIT)
    initial = {field: getattr(current, field) for field in services.POLICY_FIELDS}
    initial["allowed_models"] = ", ".join(current.allowed_models)
    form = forms.PolicyForm(
        request.POST or None,
        initial=initial,
        price_table=current.price_table,
        pii_patterns=current.pii_patterns,
    )
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
        status=400 if form.errors else 200,
    )
