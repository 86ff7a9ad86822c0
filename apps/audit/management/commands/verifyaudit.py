from django.core.management.base import BaseCommand, CommandError

from apps.audit.services import audit_verify
from apps.tenants.selectors import tenant_get_by_slug, tenant_list_all


class Command(BaseCommand):
    help = "Verifies every tenant's audit hash chain (or one tenant's); exits non-zero if any is broken."

    def add_arguments(self, parser):
        parser.add_argument("--tenant", help="slug of one tenant to verify")

    def handle(self, *args, tenant=None, **options):
        tenants = [tenant_get_by_slug(slug=tenant)] if tenant else list(tenant_list_all())
        broken = 0
        for each in tenants:
            breaks = audit_verify(tenant=each)
            if breaks:
                broken += 1
                for item in breaks:
                    self.stderr.write(f"{item.tenant_slug}: sequence {item.sequence}: {item.problem}")
            else:
                self.stdout.write(f"{each.slug}: chain intact")
        if broken:
            raise CommandError(f"audit chain broken in {broken} tenant(s)")
