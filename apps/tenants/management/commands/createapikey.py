from django.core.management.base import BaseCommand, CommandError

from apps.audit.services import Actor
from apps.core.errors import DomainError
from apps.tenants.permissions import Scope
from apps.tenants.selectors import tenant_get_by_slug
from apps.tenants.services import api_key_create


class Command(BaseCommand):
    help = "Creates an API key for a tenant and prints the key alone on the last line (shown only once)."

    def add_arguments(self, parser):
        parser.add_argument("tenant_slug")
        parser.add_argument(
            "--scope",
            action="append",
            dest="scopes",
            required=True,
            choices=[scope.value for scope in Scope],
            help="repeat for several scopes",
        )
        parser.add_argument("--name", default=None)
        parser.add_argument("--expires-days", type=int, default=None)

    def handle(self, *args, tenant_slug, scopes, name, expires_days, **options):
        try:
            tenant = tenant_get_by_slug(slug=tenant_slug)
            key, raw = api_key_create(
                tenant=tenant,
                actor=Actor.system("manage.py createapikey"),
                name=name or f"cli-{'-'.join(sorted(scopes))}-{tenant.api_keys.count() + 1}",
                scopes=scopes,
                expires_in_days=expires_days,
            )
        except DomainError as error:
            raise CommandError(error.message) from None
        self.stderr.write(f"created key {key.name!r} ({key.prefix}…) scopes={','.join(key.scopes)}")
        self.stdout.write(raw)
