"""Inviting a person into a tenant from the console (services, each in a transaction with its audit event).

An admin invites by email or username with a role. A person with an account is added as a member at once
(`membership_add`); anyone else gets an account without a usable password and the admin gets a link to hand
them (no mail is sent: this installation has no mail server to trust). The link carries Django's password
reset token for that account, so it stops working once the password is set, and after
`PASSWORD_RESET_TIMEOUT` (three days by default); following it, the person sets a password and is signed in.
"""

import re
from dataclasses import dataclass

from django.contrib.auth import get_user_model, password_validation
from django.contrib.auth.tokens import default_token_generator
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils.encoding import force_bytes, force_str
from django.utils.http import urlsafe_base64_decode, urlsafe_base64_encode

from apps.audit.services import Actor, audit_record
from apps.core.errors import Conflict, ValidationFailed
from apps.tenants.models import Membership, Tenant
from apps.tenants.permissions import Role
from apps.tenants.selectors import membership_list_for_user
from apps.tenants.services import membership_add, tenant_create

USERNAME_LENGTH = 150


@dataclass(frozen=True)
class Invitation:
    membership: Membership
    needs_password: bool  # a new account: hand the person the link (invite_link_parts) to set a password


def _free_username(base: str) -> str:
    User = get_user_model()
    base = re.sub(r"[^\w.@+-]", "", base)[: USERNAME_LENGTH - 4] or "member"
    candidate, suffix = base, 1
    while User.objects.filter(username__iexact=candidate).exists():
        suffix += 1
        candidate = f"{base}{suffix}"
    return candidate


@transaction.atomic
def member_invite(*, tenant: Tenant, actor: Actor, identifier: str, role: str) -> Invitation:
    """Adds the person named by `identifier` (a username or an email) to `tenant` with `role`: an existing
    account at once (audited `member.add`), otherwise a new account without a usable password (audited
    `member.invite`; the username is the email's local part, made unique). 409 `already_member`; 400 for an
    unknown role or an empty identifier."""
    identifier = identifier.strip()
    if not identifier:
        raise ValidationFailed("name a person by email or username", fields={"user": ["required"]})
    if role not in Role.values:
        raise ValidationFailed(f"unknown role {role!r}", fields={"role": ["unknown role"]})
    User = get_user_model()
    existing = User.objects.filter(Q(username__iexact=identifier) | Q(email__iexact=identifier)).first()
    if existing is not None:
        membership = membership_add(tenant=tenant, actor=actor, user_identifier=identifier, role=role)
        return Invitation(membership=membership, needs_password=not existing.has_usable_password())
    email = identifier if "@" in identifier else ""
    user = User(username=_free_username(identifier.split("@", 1)[0] if email else identifier), email=email)
    user.set_unusable_password()
    user.save()
    try:
        with transaction.atomic():
            membership = Membership.objects.create(tenant=tenant, user=user, role=Role(role))
    except IntegrityError:  # pragma: no cover (a new account has no membership)
        raise Conflict(f"{user.username} is already a member", code="already_member") from None
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="member.invite",
        target=membership,
        data={"user": user.username, "email": email, "role": role},
    )
    return Invitation(membership=membership, needs_password=True)


def invite_link_parts(user) -> tuple[str, str]:
    """(uidb64, token) of the link that lets `user` set a first password."""
    return urlsafe_base64_encode(force_bytes(user.pk)), default_token_generator.make_token(user)


def invited_user(*, uidb64: str, token: str):
    """The account the link names while the link is good (its token valid, no usable password yet), else
    None."""
    try:
        user = get_user_model().objects.get(pk=force_str(urlsafe_base64_decode(uidb64)))
    except (ValueError, TypeError, OverflowError, get_user_model().DoesNotExist):
        return None
    if user.has_usable_password() or not default_token_generator.check_token(user, token):
        return None
    return user


@transaction.atomic
def invitation_accept(*, user, password: str):
    """Sets the invited person's first password (Django's validators; 400 with their messages) and records
    `member.password_set` in each tenant they belong to. The link then stops working (the token covers the
    password)."""
    try:
        password_validation.validate_password(password, user)
    except ValidationError as error:
        raise ValidationFailed(" ".join(error.messages), fields={"password": list(error.messages)}) from None
    user.set_password(password)
    user.save(update_fields=["password"])
    for membership in membership_list_for_user(user=user):  # tenant order: audit chains locked in one order
        audit_record(
            tenant=membership.tenant,
            actor=Actor.user(user),
            verb="member.password_set",
            target=membership,
            data={"user": user.username},
        )
    return user


@transaction.atomic
def tenant_create_with_admin(*, slug: str, name: str, admin_identifier: str, actor: Actor):
    """A new tenant (a staff user's act from the console) and its first admin, invited as `member_invite`
    invites, in one transaction: (tenant, invitation). 409 `tenant_exists` when the slug is taken."""
    tenant, created = tenant_create(slug=slug, name=name, actor=actor)
    if not created:
        raise Conflict(
            f"a tenant has the slug {slug!r} already", code="tenant_exists", fields={"slug": ["taken"]}
        )
    invitation = member_invite(tenant=tenant, actor=actor, identifier=admin_identifier, role=Role.ADMIN)
    return tenant, invitation
