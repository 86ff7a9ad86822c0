from django.core.management.base import BaseCommand, CommandError

from apps.audit.services import Actor
from apps.core.errors import DomainError
from apps.inference.admin_tokens import inference_admin_token
from apps.inference.selectors import backend_grant_list
from apps.inference.services import backend_grant_create, backend_grant_revoke
from apps.tenants.selectors import tenant_get_by_slug


class Command(BaseCommand):
    help = (
        "Grants a backend address of the operator's network to one tenant, so that its members may register "
        "backends there (apps/inference/grants.py); --revoke takes it back; no address lists the tenant's grants."
    )

    def add_arguments(self, parser):
        parser.add_argument("tenant_slug")
        parser.add_argument(
            "address",
            nargs="?",
            help="HOST:PORT (HOST a name, an address or a network such as 10.0.5.0/24; PORT a number or *)",
        )
        parser.add_argument("--revoke", action="store_true", help="take the grant back")
        parser.add_argument(
            "--print-admin-token",
            action="store_true",
            help="also print the admin token of the embedded server at this exact HOST:PORT (start it with "
            "AREAL_INFERENCE_ADMIN_TOKEN set to it)",
        )

    def handle(self, *args, tenant_slug, address, revoke, print_admin_token, **options):
        actor = Actor.system("manage.py backendgrant")
        if print_admin_token and (not address or "*" in address or "/" in address):
            raise CommandError("--print-admin-token needs one exact HOST:PORT: a token belongs to one server")
        try:
            tenant = tenant_get_by_slug(slug=tenant_slug)
            if not address:
                for grant in backend_grant_list(tenant=tenant):
                    self.stdout.write(grant.address)
                return
            if revoke:
                revoked = backend_grant_revoke(tenant=tenant, actor=actor, address=address)
                self.stdout.write(
                    f"revoked {address} from {tenant.slug}" if revoked else f"{address}: no grant"
                )
                return
            grant, created = backend_grant_create(tenant=tenant, actor=actor, address=address)
            token = inference_admin_token(f"http://{grant.address}") if print_admin_token else None
        except DomainError as error:
            raise CommandError(error.message) from None
        self.stdout.write(f"{'granted' if created else 'already granted'} {grant.address} to {tenant.slug}")
        if print_admin_token:
            self.stdout.write(token)
