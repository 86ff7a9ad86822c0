from django.contrib.auth.models import AbstractUser
from django.db import models


class User(AbstractUser):
    """A person who signs in to the console. Machines use API keys, not users."""

    class Meta:
        db_table = "core_user"


class TenantQuerySet(models.QuerySet):
    """The manager of every tenant-owned table: `Model.objects.for_tenant(tenant)` (STYLE.md)."""

    def for_tenant(self, tenant):
        return self.filter(tenant=tenant)
