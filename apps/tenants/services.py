"""Every write to tenants, policy, members and API keys. Each runs in a transaction, validates, writes,
and records its audit event in the same transaction."""

from datetime import timedelta
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from apps.audit.services import Actor, audit_record
from apps.core.errors import Conflict, NotFound, ValidationFailed
from apps.core.selectors import get_in_tenant
from apps.tenants.authentication import api_key_cache_forget
from apps.tenants.keys import key_generate, key_hash, key_prefix
from apps.tenants.models import ApiKey, Membership, Tenant, TenantPolicy
from apps.tenants.permissions import Role, Scope
from workers.pii import InvalidPattern, patterns_from_policy

MAX_GRACE = timedelta(days=30)
POLICY_FIELDS = (
    "allowed_models",
    "rate_limit_rpm",
    "rate_limit_tpm",
    "monthly_budget_usd",
    "consent_mode",
    "retention_days",
    "pii_mode",
    "price_table",
    "pii_patterns",
    "late_reward_hours",
    "session_idle_seconds",
    "review_required",
    "two_person_promotion",
)


@transaction.atomic
def tenant_create(*, slug: str, name: str = "", actor: Actor) -> tuple[Tenant, bool]:
    """Creates the tenant and its default policy; idempotent on slug (returns (tenant, created))."""
    tenant, created = Tenant.objects.get_or_create(slug=slug, defaults={"name": name or slug})
    if created:
        TenantPolicy.objects.create(tenant=tenant)
        audit_record(
            tenant=tenant, actor=actor, verb="tenant.create", target=tenant, data={"name": tenant.name}
        )
    return tenant, created


def _validate_price_table(table) -> None:
    if not isinstance(table, dict):
        raise ValidationFailed(
            "price_table must be an object keyed by model", fields={"price_table": ["not an object"]}
        )
    for model, prices in table.items():
        if not isinstance(prices, dict) or set(prices) - {"prompt_per_1k", "completion_per_1k"}:
            raise ValidationFailed(
                f"price_table[{model!r}] must be {{prompt_per_1k, completion_per_1k}}",
                fields={"price_table": [f"bad entry for {model}"]},
            )
        for key, value in prices.items():
            if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                raise ValidationFailed(
                    f"price_table[{model!r}].{key} must be a non-negative number",
                    fields={"price_table": [f"bad price for {model}.{key}"]},
                )


def _validate_pii_patterns(patterns) -> None:
    """The sanitizer's own validation, the one the gateway compiles the patterns with: a pattern it would
    refuse (or one matching the empty string, or too costly to compile) is never saved."""
    try:
        patterns_from_policy(patterns)
    except InvalidPattern as error:
        raise ValidationFailed(
            f"PII pattern {error.name!r}: {error.reason}" if error.name else error.reason,
            code="invalid_pii_pattern",
            fields={"pii_patterns": [str(error)]},
        ) from None


@transaction.atomic
def policy_update(*, tenant: Tenant, actor: Actor, changes: dict) -> TenantPolicy:
    """Applies validated policy changes; the audit event records each field's old and new value."""
    unknown = set(changes) - set(POLICY_FIELDS)
    if unknown:
        raise ValidationFailed(f"unknown policy fields: {', '.join(sorted(unknown))}")
    if "price_table" in changes:
        _validate_price_table(changes["price_table"])
    if "pii_patterns" in changes:
        _validate_pii_patterns(changes["pii_patterns"])
    policy = TenantPolicy.objects.select_for_update().get(tenant=tenant)
    diff = {}
    for field, value in changes.items():
        old = getattr(policy, field)
        if field == "monthly_budget_usd" and value is not None:
            value = Decimal(str(value))
        if old != value:
            diff[field] = {"old": old, "new": value}
            setattr(policy, field, value)
    if diff:
        policy.full_clean(exclude=["tenant"])
        policy.save()
        audit_record(tenant=tenant, actor=actor, verb="policy.update", target=policy, data=diff)
    return policy


def _admin_count(tenant: Tenant) -> int:
    return Membership.objects.filter(tenant=tenant, role=Role.ADMIN).count()


@transaction.atomic
def membership_add(*, tenant: Tenant, actor: Actor, user_identifier: str, role: str) -> Membership:
    """Adds an existing user (by username or email) with a role. 409 if already a member."""
    user = (
        get_user_model()
        .objects.filter(Q(username__iexact=user_identifier) | Q(email__iexact=user_identifier))
        .first()
    )
    if user is None:
        raise NotFound(f"no user with username or email {user_identifier!r}", code="user_not_found")
    try:
        with transaction.atomic():
            membership = Membership.objects.create(tenant=tenant, user=user, role=Role(role))
    except IntegrityError:
        raise Conflict(
            f"{user.username} is already a member of {tenant.slug}", code="already_member"
        ) from None
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="member.add",
        target=membership,
        data={"user": user.username, "role": role},
    )
    return membership


def _lock_membership(*, tenant: Tenant, membership_id) -> Membership:
    return get_in_tenant(
        Membership.objects.select_for_update().select_related("user"),
        tenant=tenant,
        pk=membership_id,
        code="member_not_found",
        message="no such member in this tenant",
    )


@transaction.atomic
def membership_change_role(*, tenant: Tenant, actor: Actor, membership_id, role: str) -> Membership:
    membership = _lock_membership(tenant=tenant, membership_id=membership_id)
    role = Role(role)
    if membership.role == role:
        return membership
    if membership.role == Role.ADMIN and _admin_count(tenant) == 1:
        raise Conflict("cannot demote the tenant's last admin", code="last_admin")
    old = membership.role
    membership.role = role
    membership.save(update_fields=["role"])
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="member.role_change",
        target=membership,
        data={"user": membership.user.username, "old": old, "new": role},
    )
    return membership


@transaction.atomic
def membership_remove(*, tenant: Tenant, actor: Actor, membership_id) -> None:
    membership = _lock_membership(tenant=tenant, membership_id=membership_id)
    if membership.role == Role.ADMIN and _admin_count(tenant) == 1:
        raise Conflict("cannot remove the tenant's last admin", code="last_admin")
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="member.remove",
        target=membership,
        data={"user": membership.user.username, "role": membership.role},
    )
    membership.delete()


def _validate_scopes(scopes) -> list[str]:
    if not scopes:
        raise ValidationFailed(
            "an API key needs at least one scope", fields={"scopes": ["at least one scope"]}
        )
    valid = {scope.value for scope in Scope}
    unknown = [scope for scope in scopes if scope not in valid]
    if unknown:
        raise ValidationFailed(
            f"unknown scopes: {', '.join(unknown)}; valid scopes are {', '.join(sorted(valid))}",
            fields={"scopes": [f"unknown scope {scope!r}" for scope in unknown]},
        )
    return sorted(set(scopes))


def _creating_key_id(actor: Actor) -> int | None:
    """The key that is making a key, recorded so the new key answers to that key's person."""
    return int(actor.id) if actor.kind == "api_key" else None


@transaction.atomic
def api_key_create(
    *,
    tenant: Tenant,
    actor: Actor,
    name: str,
    scopes: list[str],
    expires_in_days: int | None = None,
    created_by=None,
) -> tuple[ApiKey, str]:
    """Creates a key and returns (key, raw secret). The raw secret exists only in this return value.
    Records who made it: `created_by` (a person) or `created_by_key` (a key acting through the API)."""
    scopes = _validate_scopes(scopes)
    name = (name or "").strip()
    if not name:
        raise ValidationFailed("an API key needs a name", fields={"name": ["required"]})
    if expires_in_days is not None and not 1 <= expires_in_days <= 3650:
        raise ValidationFailed(
            "expires_in_days must be between 1 and 3650", fields={"expires_in_days": ["out of range"]}
        )
    if ApiKey.objects.for_tenant(tenant).filter(name=name).exists():
        raise Conflict(f"this tenant already has a key named {name!r}", code="api_key_name_taken")
    raw = key_generate()
    expires_at = timezone.now() + timedelta(days=expires_in_days) if expires_in_days else None
    key = ApiKey.objects.create(
        tenant=tenant,
        name=name,
        prefix=key_prefix(raw),
        hashed_secret=key_hash(raw),
        scopes=scopes,
        expires_at=expires_at,
        created_by=created_by,
        created_by_key_id=_creating_key_id(actor),
    )
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="api_key.create",
        target=key,
        data={
            "name": name,
            "prefix": key.prefix,
            "scopes": scopes,
            "expires_at": expires_at.isoformat() if expires_at else None,
        },
    )
    return key, raw


def _forget_cached(hashed: str) -> None:
    """Evicts now and again after commit: a request that re-cached the row before the commit would
    otherwise keep the stale entry until it expires."""
    api_key_cache_forget(hashed)
    transaction.on_commit(lambda: api_key_cache_forget(hashed))


def _lock_key(*, tenant: Tenant, key_id) -> ApiKey:
    return get_in_tenant(
        ApiKey.objects.select_for_update(),
        tenant=tenant,
        pk=key_id,
        code="api_key_not_found",
        message="no such API key in this tenant",
    )


@transaction.atomic
def api_key_revoke(*, tenant: Tenant, actor: Actor, key_id) -> ApiKey:
    """Revokes now. The authentication cache forgets the key when the transaction commits."""
    key = _lock_key(tenant=tenant, key_id=key_id)
    if key.revoked_at:
        raise Conflict("this API key is already revoked", code="api_key_revoked")
    key.revoked_at = timezone.now()
    key.save(update_fields=["revoked_at"])
    audit_record(tenant=tenant, actor=actor, verb="api_key.revoke", target=key, data={"prefix": key.prefix})
    _forget_cached(key.hashed_secret)
    return key


@transaction.atomic
def api_key_rotate(
    *, tenant: Tenant, actor: Actor, key_id, grace_seconds: int, created_by=None
) -> tuple[ApiKey, str]:
    """Issues a replacement with the same scopes and expiry horizon; the old key stays valid for
    `grace_seconds` (0: ends now). Returns (new key, raw secret)."""
    if not 0 <= grace_seconds <= MAX_GRACE.total_seconds():
        raise ValidationFailed(
            f"grace_seconds must be between 0 and {int(MAX_GRACE.total_seconds())}",
            fields={"grace_seconds": ["out of range"]},
        )
    old = _lock_key(tenant=tenant, key_id=key_id)
    now = timezone.now()
    if old.status_at(now) not in {"active"}:
        raise Conflict(
            f"only an active key can be rotated; this one is {old.status_at(now)}", code="api_key_not_active"
        )
    raw = key_generate()
    new = ApiKey.objects.create(
        tenant=tenant,
        name=_rotated_name(tenant, old.name),
        prefix=key_prefix(raw),
        hashed_secret=key_hash(raw),
        scopes=old.scopes,
        expires_at=old.expires_at,
        created_by=created_by,
        created_by_key_id=_creating_key_id(actor),
    )
    old.replaced_by = new
    old.grace_until = now + timedelta(seconds=grace_seconds)
    old.save(update_fields=["replaced_by", "grace_until"])
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="api_key.rotate",
        target=old,
        data={"old_prefix": old.prefix, "new_prefix": new.prefix, "grace_until": old.grace_until.isoformat()},
    )
    _forget_cached(old.hashed_secret)
    return new, raw


def _rotated_name(tenant: Tenant, name: str) -> str:
    base = name.split(" (rotated")[0]
    taken = set(
        ApiKey.objects.for_tenant(tenant).filter(name__startswith=base).values_list("name", flat=True)
    )
    number = 2
    while f"{base} (rotated {number})" in taken:
        number += 1
    return f"{base} (rotated {number})"
