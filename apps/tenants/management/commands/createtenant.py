from django.core.management.base import BaseCommand

from apps.audit.services import Actor
from apps.tenants.services import tenant_create


class Command(BaseCommand):
    help = "Creates a tenant with the default policy. Idempotent: an existing slug is left as it is."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--name", default="")

    def handle(self, *args, slug, name, **options):
        tenant, created = tenant_create(slug=slug, name=name, actor=Actor.system("manage.py createtenant"))
        self.stdout.write(f"{'created' if created else 'exists'}: {tenant.slug} ({tenant.name})")
