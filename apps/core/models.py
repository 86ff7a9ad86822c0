from django.contrib.auth.models import AbstractUser
from django.db import models
from django.utils import timezone


class User(AbstractUser):
    """A person who signs in to the console. Machines use API keys, not users."""

    class Meta:
        db_table = "core_user"


class TenantQuerySet(models.QuerySet):
    """The manager of every tenant-owned table: `Model.objects.for_tenant(tenant)` (STYLE.md)."""

    def for_tenant(self, tenant):
        return self.filter(tenant=tenant)


class TenantOwned(models.Model):
    """The base of every tenant-owned table: its `tenant` and a manager with `for_tenant`.

    The tenant is a foreign key deleted with the tenant and not reachable from it. A model that needs
    another shape (a reverse name such as `tenant.trajectories`, PROTECT, one row per tenant) declares its
    own `tenant` field, which replaces this one."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")

    objects = TenantQuerySet.as_manager()

    class Meta:
        abstract = True


class TimestampedTenantOwned(TenantOwned):
    """A tenant-owned table whose rows record when they were created. Tables that name that moment
    otherwise (`at`, `started_at`, `occurred_at`) use TenantOwned and keep their own column."""

    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        abstract = True
