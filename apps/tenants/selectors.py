"""Reads for tenants, members and keys. Tenant first; another tenant's object is simply not found."""

from apps.core.errors import NotFound
from apps.tenants.models import ApiKey, Membership, Tenant


def tenant_get_by_slug(*, slug: str) -> Tenant:
    try:
        return Tenant.objects.get(slug=slug)
    except Tenant.DoesNotExist:
        raise NotFound(f"no tenant with slug {slug!r}", code="tenant_not_found") from None


def tenant_list_all():
    return Tenant.objects.order_by("slug")


def tenant_list_for_user(*, user):
    return Tenant.objects.filter(memberships__user=user).order_by("slug")


def membership_for(*, tenant, user) -> Membership | None:
    if user is None or not user.is_authenticated:
        return None
    return Membership.objects.filter(tenant=tenant, user=user).first()


def membership_list(*, tenant):
    return Membership.objects.filter(tenant=tenant).select_related("user").order_by("user__username")


def membership_get(*, tenant, membership_id) -> Membership:
    try:
        return Membership.objects.select_related("user").get(tenant=tenant, pk=membership_id)
    except (Membership.DoesNotExist, ValueError, TypeError):
        raise NotFound("no such member in this tenant", code="member_not_found") from None


def api_key_list(*, tenant, include_inactive: bool = True):
    keys = ApiKey.objects.for_tenant(tenant)
    if not include_inactive:
        keys = keys.filter(revoked_at__isnull=True)
    return keys


def api_key_get(*, tenant, key_id) -> ApiKey:
    try:
        return ApiKey.objects.for_tenant(tenant).get(pk=key_id)
    except (ApiKey.DoesNotExist, ValueError, TypeError):
        raise NotFound("no such API key in this tenant", code="api_key_not_found") from None
