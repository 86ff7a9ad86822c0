from django.core.management.base import BaseCommand, CommandError

from apps.audit.services import Actor
from apps.core.errors import DomainError
from apps.inference.egress import backend_url_check
from apps.inference.grants import host_port
from apps.inference.models import CAPABILITY_FIELDS, BackendKind, CapParameter
from apps.inference.selectors import backend_by_name
from apps.inference.services import backend_check, backend_grant_create, backend_register, backend_update
from apps.tenants.selectors import tenant_get_by_slug
from areal_web.env import env_str


class Command(BaseCommand):
    help = (
        "Registers an inference backend for a tenant (or updates the one with that name) and probes it. An address "
        "of the operator's (AREAL_BACKEND_ALLOWED_HOSTS, not `public`) is granted to the tenant first, as "
        "`backendgrant` does; one that is another tenant's is refused."
    )

    def add_arguments(self, parser):
        parser.add_argument("tenant_slug")
        parser.add_argument("--name", required=True)
        parser.add_argument("--url", required=True, help="server root, e.g. http://127.0.0.1:8100")
        parser.add_argument("--kind", required=True, choices=BackendKind.values)
        parser.add_argument("--model", required=True, help="the served model name clients ask for")
        parser.add_argument("--model-version", default="", help="model version it serves")
        parser.add_argument("--weight", type=int, default=1)
        parser.add_argument(
            "--credential-env",
            metavar="VARIABLE",
            help="the environment variable holding the backend's API credential (never put it on the command "
            "line); stored encrypted",
        )
        parser.add_argument(
            "--text-only",
            action="store_true",
            help="a hosted API: returns no token ids, logprobs or versions and accepts no return_token_ids",
        )
        parser.add_argument(
            "--cap-parameter",
            choices=CapParameter.values,
            help="the field the server reads a chat completion's cap from (default: the kind's)",
        )

    def handle(self, *args, tenant_slug, name, url, kind, model, model_version, weight, **options):
        actor = Actor.system("manage.py registerbackend")
        fields = {
            "base_url": url,
            "kind": kind,
            "served_model": model,
            "model_version": model_version,
            "weight": weight,
        }
        if options.get("text_only"):
            fields.update(dict.fromkeys(CAPABILITY_FIELDS, False))
        if options.get("cap_parameter"):
            fields["cap_parameter"] = options["cap_parameter"]
        if options.get("credential_env"):
            credential = env_str(options["credential_env"], "")
            if not credential:
                raise CommandError(f"the environment variable {options['credential_env']} is not set")
            fields["credential"] = credential
        try:
            tenant = tenant_get_by_slug(slug=tenant_slug)
            if backend_url_check(url).operator_listed:  # the operator registering is the operator granting
                backend_grant_create(tenant=tenant, actor=actor, address=host_port(url))
            existing = backend_by_name(tenant=tenant, name=name)
            if existing:
                backend = backend_update(tenant=tenant, actor=actor, backend_id=existing.pk, changes=fields)
            else:
                backend = backend_register(tenant=tenant, actor=actor, name=name, **fields)
        except DomainError as error:
            raise CommandError(error.message) from None
        backend = backend_check(backend=backend)
        self.stdout.write(
            f"{'updated' if existing else 'registered'} {backend.name} → {backend.base_url}: "
            f"{backend.state}{' (' + backend.last_error + ')' if backend.last_error else ''}"
        )
