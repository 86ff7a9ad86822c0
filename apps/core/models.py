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


class ImmutableRowError(RuntimeError):
    """A change to an append-only row. A programming error, never an answer to a request."""


class ImmutableQuerySet(TenantQuerySet):
    """The manager of an append-only table: rows are inserted and read, never changed or deleted in bulk.
    `dangerously_writable()` is the one way round it."""

    def update(self, **kwargs):
        raise ImmutableRowError(f"{self.model.__name__} rows are immutable")

    def bulk_update(self, objs, fields, batch_size=None):
        raise ImmutableRowError(f"{self.model.__name__} rows are immutable")

    def delete(self):
        raise ImmutableRowError(f"{self.model.__name__} rows are immutable")

    delete.queryset_only = True  # type: ignore[attr-defined]  # as Django's own: no `Model.objects.delete()`

    def dangerously_writable(self) -> TenantQuerySet:
        """The same rows through a queryset that may update and delete them: for a purge that must remove
        history, and for tests that play someone editing the table behind the application's back."""
        return TenantQuerySet(
            model=self.model,
            query=self.query.chain(),
            using=self._db,  # type: ignore[attr-defined]  # QuerySet's own, not in its stubs
            hints=self._hints,  # type: ignore[attr-defined]
        )


class ImmutableModel(models.Model):
    """Append-only history: a row is inserted once; saving it again, deleting it, or updating or deleting
    rows through the manager raises ImmutableRowError. Rows still go when a row they belong to is deleted
    (a cascade does not go through this model or its manager)."""

    objects = ImmutableQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise ImmutableRowError(f"{type(self).__name__} rows are immutable")
        # Insert only: a new instance given an existing primary key must not overwrite that row.
        kwargs["force_insert"] = True
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ImmutableRowError(f"{type(self).__name__} rows are immutable")
