"""The demo's warm-up: the default model, supervised on scripted episodes (the skills) and the legacy agent's
logs (its habit) into a weak but nonzero base, kept in var/demo-cache keyed by the seed, the warm-up settings
and the initial weights (a second `make demo` reuses it; DEMO_FRESH_BASE=1 trains it again), then registered
as the model's version 0 in production.
"""

import shutil
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import CommandError

from apps.demo.report import bar


class WarmUpMixin:
    """Part of apps.demo.run.Demo (whose __init__ declares the state): the base the loop starts from."""

    def _warm_up(self) -> Path:
        import hashlib

        from workers.envs.warmup import train_base
        from workers.inference.modelgen import create_default_model

        steps = self.demo_settings.sft_steps
        skill_steps = self.demo_settings.skill_steps
        learning_rate = self.demo_settings.sft_learning_rate
        started = time.monotonic()
        initial = self.run_dir / "initial"
        base_dir = self.run_dir / "base"
        self._say(f"creating the default model (seed {self.seed})")
        create_default_model(initial, seed=self.seed)
        weights = hashlib.sha256((initial / "model.safetensors").read_bytes()).hexdigest()[:12]
        cached = (
            Path(settings.VAR_DIR).parent
            / "demo-cache"
            / f"base-{weights}-skill{skill_steps}-sft{steps}-lr{learning_rate:g}-seed{self.seed}"
        )
        if (cached / "model.safetensors").exists() and not self.demo_settings.fresh_base:
            shutil.copytree(cached, base_dir)
            self.base_reused = True
            self._say(
                f"warm-up: reusing the base trained by an earlier run ({cached}; DEMO_FRESH_BASE=1 retrains)"
            )
            return base_dir
        self._say(
            f"warm-up: SFT on {skill_steps} batches of short scripted episodes (the skills), then {steps} of "
            f"the legacy agent's logs (its habit): a weak base"
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
            batch_size=16,
            learning_rate=learning_rate,
            skill_steps=skill_steps,
            seed=self.seed,
            progress=progress,
        )
        self.out.write("")
        self.warmup_seconds = time.monotonic() - started
        partial = cached.with_name(cached.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(base_dir, partial)
        shutil.rmtree(cached, ignore_errors=True)
        partial.rename(cached)
        return base_dir

    def _register_base(self, base_dir: Path):
        from apps.audit.services import Actor
        from apps.training.models import VersionStatus
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
