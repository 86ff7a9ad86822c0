"""Reads for tenants, members and keys. Tenant first; another tenant's object is simply not found."""

from django.db.models import F

from apps.core.errors import Forbidden, NotFound
from apps.core.selectors import get_in_tenant
from apps.tenants.models import ApiKey, Membership, Tenant, TenantPolicy


def tenant_get_by_slug(*, slug: str) -> Tenant:
    try:
        return Tenant.objects.get(slug=slug)
    except Tenant.DoesNotExist:
        raise NotFound(f"no tenant with slug {slug!r}", code="tenant_not_found") from None


def tenant_get(*, tenant_id: int) -> Tenant:
    """The tenant an authenticated API key belongs to (the key's row names it, so it exists)."""
    return Tenant.objects.get(pk=tenant_id)


def tenant_list_all():
    return Tenant.objects.order_by("slug")


def tenant_list_for_user(*, user):
    """The tenants a person is a member of, by slug, each with `role`: theirs there (one join: a person holds
    one membership per tenant). Scoped to the person, not to a tenant: the tenant switcher and `GET tenants/`."""
    return (
        Tenant.objects.filter(memberships__user=user).annotate(role=F("memberships__role")).order_by("slug")
    )


def membership_for_user(*, user, tenant_slug: str) -> Membership | None:
    """The person's membership (with its tenant) in the tenant of that slug; None when they have none there."""
    return Membership.objects.filter(user=user, tenant__slug=tenant_slug).select_related("tenant").first()


def membership_first_for_user(*, user) -> Membership | None:
    """The person's first membership (with its tenant) by tenant slug; None when they belong to no tenant."""
    return Membership.objects.filter(user=user).select_related("tenant").order_by("tenant__slug").first()


def membership_list_for_user(*, user):
    """Every membership of the person, with its tenant, in tenant order (the sign-in audit writes one event
    per tenant, locking chains in a fixed order)."""
    return Membership.objects.filter(user_id=user.pk).select_related("tenant").order_by("tenant_id")


def membership_role_of_active_user(
    *, user_id: int, tenant_slug=None, tenant_id=None
) -> tuple[int, str] | None:
    """(tenant id, role) of an active person's membership in the tenant named by slug, else by id; None when
    they have none there or are inactive (the live pages' WebSocket checks, at connect and every recheck)."""
    memberships = Membership.objects.filter(user_id=user_id, user__is_active=True)
    if tenant_slug is not None:
        memberships = memberships.filter(tenant__slug=tenant_slug)
    else:
        memberships = memberships.filter(tenant_id=tenant_id)
    return memberships.values_list("tenant_id", "role").first()


def membership_list(*, tenant: Tenant):
    return Membership.objects.filter(tenant=tenant).select_related("user").order_by("user__username")


def membership_get(*, tenant: Tenant, membership_id) -> Membership:
    return get_in_tenant(
        Membership.objects.select_related("user"),
        tenant=tenant,
        pk=membership_id,
        code="member_not_found",
        message="no such member in this tenant",
    )


def api_key_list(*, tenant: Tenant, include_inactive: bool = True):
    keys = ApiKey.objects.for_tenant(tenant)
    if not include_inactive:
        keys = keys.filter(revoked_at__isnull=True)
    return keys


def api_key_get(*, tenant: Tenant, key_id) -> ApiKey:
    return get_in_tenant(
        ApiKey, tenant=tenant, pk=key_id, code="api_key_not_found", message="no such API key in this tenant"
    )


KEY_CHAIN_LIMIT = 32  # keys made by keys made by keys...: far more than any real chain


def person_behind(*, tenant: Tenant, actor_kind: str, actor_id: str) -> int | None:
    """The id of the person who acts through a principal: a user is themself; an API key is the person who
    created it, or, for a key made or rotated through the API by another key, that key's person (followed
    up the chain). None: no person is recorded (a key from the CLI or the system, or its creator deleted)."""
    if actor_kind == "user":
        return int(actor_id) if actor_id else None
    if actor_kind != "api_key" or not actor_id:
        return None
    key_id: int | None = int(actor_id)
    seen: set[int] = set()
    while key_id is not None and key_id not in seen and len(seen) < KEY_CHAIN_LIMIT:
        seen.add(key_id)
        row = (
            ApiKey.objects.for_tenant(tenant)
            .filter(pk=key_id)
            .values("created_by_id", "created_by_key_id")
            .first()
        )
        if row is None:
            return None
        if row["created_by_id"] is not None:
            return row["created_by_id"]
        key_id = row["created_by_key_id"]
    return None


def two_person_rule_on(*, tenant: Tenant) -> bool:
    """Whether the tenant's policy asks two different people for every change of what serves production
    (`TenantPolicy.two_person_promotion`)."""
    return bool(
        TenantPolicy.objects.filter(tenant=tenant).values_list("two_person_promotion", flat=True).first()
    )


def two_person_rule_refuse(*, tenant: Tenant, change: str) -> None:
    """The one check of every path that changes what serves production by one principal's act (a direct
    publication, an online run that publishes its versions): under the tenant's two-person rule it is refused
    with 403 `two_person_rule`, since production then changes only through a release that a second person
    approves. `change` says what was asked, for the message."""
    if two_person_rule_on(tenant=tenant):
        raise Forbidden(
            f"this tenant's two-person rule: {change} would change what serves production on one person's "
            "word; release the version instead (a second person approves the promotion)",
            code="two_person_rule",
        )
