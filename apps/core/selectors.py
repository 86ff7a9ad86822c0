from typing import TYPE_CHECKING, cast

from django.db import models

from apps.core.errors import NotFound
from apps.core.models import TenantQuerySet

if TYPE_CHECKING:  # apps.core sits below apps.tenants: the annotation only, no import at run time
    from apps.tenants.models import Tenant


def get_in_tenant(
    source: type[models.Model] | models.QuerySet,
    *,
    tenant: "Tenant",
    code: str,
    message: str | None = None,
    error: type[NotFound] = NotFound,
    **lookup,
):
    """The one row of `source` (a tenant-owned model, or a queryset of one: select_related, locks and
    prefetches are kept) in `tenant` that matches `lookup`, else `error` with `code` and `message` (by
    default "no such <verbose name> in this tenant").

    Another tenant's row answers exactly like a missing one, and so does a key of the wrong shape (a word
    for an integer key): the caller cannot tell which, so ids never leak across tenants."""
    # a tenant-owned model's manager is a TenantQuerySet; the types cannot say so of any model
    queryset = cast(TenantQuerySet, source._default_manager.all() if isinstance(source, type) else source)
    try:
        return queryset.for_tenant(tenant).get(**lookup)
    except (queryset.model.DoesNotExist, ValueError, TypeError):
        if message is None:
            message = f"no such {queryset.model._meta.verbose_name} in this tenant"
        raise error(message, code=code) from None
