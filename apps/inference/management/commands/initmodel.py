from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from areal_web.processes import DEFAULT_MODEL_DIR


class Command(BaseCommand):
    help = (
        "Creates the default small causal LM (Llama architecture, locally trained byte-level BPE, chat "
        "template with tools, safetensors) as a Hugging Face model directory, offline and deterministically."
    )

    def add_arguments(self, parser):
        parser.add_argument("--out", default=None, help=f"directory (default: var/{DEFAULT_MODEL_DIR})")
        parser.add_argument("--seed", type=int, default=0)

    def handle(self, *args, out, seed, **options):
        from workers.inference.modelgen import create_default_model, tokenizer_fingerprint

        target = Path(out) if out else settings.VAR_DIR / DEFAULT_MODEL_DIR
        path = create_default_model(target, seed=seed)
        self.stderr.write(f"tokenizer {tokenizer_fingerprint(path)[:16]}… seed {seed}")
        self.stdout.write(str(path))
