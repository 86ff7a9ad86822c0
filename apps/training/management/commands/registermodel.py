"""manage.py registermodel: a Hugging Face model directory registered as a tenant's model version (copied into
the registry's storage; apps/training/registration.py), and with --production made what serves the model.

    manage.py registermodel acme --name support-bot --dir /models/support-bot-base --production

Run by whoever runs the installation, so the directory may be anywhere (the API and the console read only
the tenant's model inbox); the directory is taken as named, but a link inside it is refused as through the
API, and what is registered is the copy, checked after it was made. Every refusal is one line on stderr and a non-zero exit.
"""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from apps.audit.services import Actor
from apps.core.errors import DomainError


class Command(BaseCommand):
    help = (
        "Registers a Hugging Face model directory (safetensors weights, tokenizer.json, a chat template) as the "
        "tenant's model NAME: version 0 of a new model, or the next version of an existing one (same "
        "tokenizer), a candidate; --production also makes it production (a model's first version; a backend "
        "must serve it)."
    )

    def add_arguments(self, parser):
        parser.add_argument("tenant_slug")
        parser.add_argument("--name", required=True, help="the model name agents will ask for")
        parser.add_argument("--dir", dest="directory", required=True, help="the model directory")
        parser.add_argument("--description", default="")
        parser.add_argument(
            "--production",
            action="store_true",
            help="also make it production and route every new session to it (needs a backend serving it)",
        )

    def handle(self, *args, tenant_slug, name, directory, description, production, **options):
        from apps.releases.serving import production_set
        from apps.tenants.selectors import tenant_get_by_slug
        from apps.training.registration import SourceDirectory, model_directory_register

        actor = Actor.system("manage.py registermodel")
        try:
            tenant = tenant_get_by_slug(slug=tenant_slug)
            version = model_directory_register(
                tenant=tenant,
                actor=actor,
                name=name,
                source_dir=SourceDirectory(root=Path(directory).resolve()),
                description=description,
            )
            self.stdout.write(f"registered {version.label} ({version.status}) → {version.checkpoint_path}")
            if production:
                state = production_set(tenant=tenant, actor=actor, version_id=version.pk)
                self.stdout.write(
                    f"{state.model}: v{state.stable.number} is production and serves new sessions"
                )
        except DomainError as error:
            raise CommandError(error.message) from None
        except OSError as error:
            raise CommandError(f"{type(error).__name__}: {error}") from None
