"""DEMO_TASK=bfcl: the loop on the Berkeley Function Calling Leaderboard (workers/envs/bfcl) with SmolLM2.

- The warm-up: SmolLM2-135M-Instruct measured zero-shot on the gate's held-out cases, then a short SFT on
  DEMO_BFCL_DEMOS demonstrations from the TRAIN split's ground truth only (workers.envs.bfcl.local), the
  base; both kept in var/demo-cache (the zero-shot figures beside the initial weights' checksum).
- The gate: `{"environment": "bfcl", "categories", "cases"}`: the first DEMO_HELDOUT held-out cases of each
  category, answered greedily in the eval worker and scored by BFCL's checker (apps.evaluation.bfcl).
- The traffic: simulated users send train-split cases through the gateway as RL sessions; the checker's
  verdict is posted as an environment reward (workers/envs/bfcl/traffic.py). No annotator: BFCL's checker
  is the label.
- The end: the table per category (zero-shot, after the warm-up, every promoted version) and, for either
  task, the learner's staleness: how many qualified trajectories it trained on, how many it dropped, and
  the trained samples by lag along the lineage (the versions' `online.staleness`).

A mixin of demo.run.Demo placed before the weather parts: each method falls back to them under
DEMO_TASK=weather.
"""

import json
import shutil
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import CommandError

from demo.report import bar
from demo.warm_up import cache_store


class NoAnnotator:
    """The BFCL loop has no human labels to simulate: the checker's reward is the label."""

    class stats:  # noqa: N801 (the annotator client's attribute)
        labelled = skipped = errors = 0
        last_problem = ""

    def stop(self, timeout: float = 0) -> None:
        return None


class BfclMixin:
    """Part of demo.run.Demo (whose __init__ declares the state): `zero_shot` is set by the warm-up."""

    zero_shot: dict | None = None

    def _bfcl(self) -> bool:
        return self.demo_config.task == "bfcl"

    def _gate(self) -> dict:
        if not self._bfcl():
            return super()._gate()
        return {
            "environment": "bfcl",
            "categories": list(self.demo_config.bfcl_categories),
            "cases": self.demo_config.heldout_cases,
            "min_gain": -self.demo_config.tolerance,
        }

    def _grouping(self) -> dict:
        """With groups of one case's answers (DEMO_BFCL_GROUP > 1) the learner takes whole groups once
        settled, and consumes a group whose answers all scored alike untrained (DAPO's dynamic sampling):
        otherwise a group cut by a batch's edge weighs a lone answer against itself or the batch."""
        if not self._bfcl() or self.demo_config.bfcl_group == 1:
            return super()._grouping()
        return {"whole_groups": True, "skip_uniform_groups": True}

    def _warm_up(self) -> Path:
        if not self._bfcl():
            return super()._warm_up()
        from workers.envs.bfcl.local import demonstration, demonstrations, train_on_demonstrations
        from workers.models.manifest import read_manifest

        demo_config = self.demo_config
        initial = self._real_model()
        weights = (read_manifest(initial) or {}).get("files", {}).get("model.safetensors", "")[:12]
        cache = Path(settings.VAR_DIR).parent / "demo-cache"
        gate = self._gate()
        self.zero_shot = self._zero_shot(initial, cache / f"bfcl-zero-shot-{weights}-{_gate_tag(gate)}.json")
        steps, batch, rate = demo_config.sft_steps, demo_config.sft_batch, demo_config.sft_learning_rate
        count = demo_config.bfcl_demonstrations
        cached = cache / (
            f"bfcl-base-{weights}-{'+'.join(demo_config.bfcl_categories)}-demos{count}-sft{steps}x{batch}"
            f"-lr{rate:g}-seed{self.seed}"
        )
        base_dir = self.run_dir / "base"
        if (cached / "model.safetensors").exists() and not demo_config.fresh_base:
            shutil.copytree(cached, base_dir)
            self.base_reused = True
            self._say(
                f"warm-up: reusing the base trained by an earlier run ({cached}; DEMO_FRESH_BASE=1 retrains)"
            )
            return base_dir
        chosen = demonstrations(demo_config.bfcl_categories, count=count, seed=self.seed)
        by_category: dict[str, int] = {}
        for case in chosen.cases:
            by_category[case.category] = by_category.get(case.category, 0) + 1
        self._say(
            f"warm-up: SFT on {len(chosen.cases)} demonstrations from the train split's ground truth "
            f"{by_category} ({len(chosen.left_out)} left out: BFCL's checker did not accept their first allowed "
            f"values), {steps} batches of {batch} at lr {rate:g}"
        )
        started = time.monotonic()

        def progress(step, total, loss):
            if self.stopping.is_set():
                raise CommandError("stopped during the warm-up; nothing was registered")
            self.out.write(f"\r  warm-up {bar(step, total)} {step}/{total} loss {loss:.3f}", ending="")
            self.out.flush()

        train_on_demonstrations(
            initial,
            base_dir,
            [(case, demonstration(case)) for case in chosen.cases],
            steps=steps,
            batch_size=batch,
            learning_rate=rate,
            seed=self.seed,
            progress=progress,
            micro_batch_tokens=demo_config.micro_batch_tokens,
        )
        self.out.write("")
        self.warmup_seconds = time.monotonic() - started
        cache_store(base_dir, cached)
        return base_dir

    def _zero_shot(self, initial: Path, path: Path) -> dict:
        """SmolLM2's own held-out figures by the gate, before any warm-up (measured once, then cached)."""
        from apps.evaluation.bfcl import bfcl_gate_heldout

        if path.exists():
            known = json.loads(path.read_text())
            self._say(f"zero-shot (cached): {known['success']:.0%} on {known['cases']} held-out cases")
            return known
        self._say("measuring SmolLM2-135M-Instruct zero-shot on the gate's held-out cases")
        result = bfcl_gate_heldout(str(initial), self._gate())
        known = {
            "success": result.success,
            "cases": result.cases,
            "reasons": result.reasons,
            "per_category": result.per_category,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(known, indent=2))
        self._say(f"zero-shot: {result.success:.0%} on {result.cases} held-out cases {result.reasons}")
        return known

    def _traffic(self, api_key: str, world):
        if not self._bfcl():
            from workers.envs.traffic import Traffic

            return Traffic(
                gateway_url=self.url,
                api_key=api_key,
                model=self.model,
                users=self.demo_config.users,
                seed=self.seed,
                world=world,
            )
        from workers.envs.bfcl.traffic import BfclTraffic

        return BfclTraffic(
            gateway_url=self.url,
            api_key=api_key,
            model=self.model,
            categories=self.demo_config.bfcl_categories,
            users=self.demo_config.users,
            seed=self.seed,
            group_size=self.demo_config.bfcl_group,
        )

    def _table(self, traffic, annotator) -> None:
        super()._table(traffic, annotator)
        extra = {"staleness": self._staleness()}
        if self._bfcl():
            extra["task"] = "bfcl"
            extra["per_category"] = self._category_table(traffic)
            extra["demonstrations"] = self.demo_config.bfcl_demonstrations
            extra["group_size"] = self.demo_config.bfcl_group
            extra["accepted_traffic"] = list(traffic.accepted)  # bench/bfcl's SFT-only baseline uses them
        path = Path(self.demo_config.summary_path or str(Path(settings.VAR_DIR) / "demo-summary.json"))
        summary = json.loads(path.read_text()) if path.exists() else {}
        path.write_text(json.dumps({**summary, **extra}, indent=2))

    def _category_table(self, traffic) -> dict:
        """Held-out accuracy per category: zero-shot, the warmed-up base, every promoted version."""
        from apps.evolution.selectors import gate_key
        from apps.training.models import ModelVersion

        key = gate_key(self._gate())
        columns: list[tuple[str, dict]] = [("zero-shot", (self.zero_shot or {}).get("per_category", {}))]
        for row in self.rows:
            if row["role"] not in {"base", "promoted"}:
                continue
            version = ModelVersion.objects.filter(
                tenant=self.tenant, name=self.model, number=row["version"]
            ).first()
            entry = ((version.metrics if version else {}).get("gate") or {}).get(key) or {}
            label = "warmed-up v0" if row["role"] == "base" else f"v{row['version']}"
            columns.append((label, entry.get("per_category", {})))
        categories = list(self.demo_config.bfcl_categories)
        self.out.write(
            "\nheld-out accuracy per category (BFCL's checker; first "
            f"{self.demo_config.heldout_cases} held-out cases of each)"
        )
        self.out.write(f"{'category':<18}" + "".join(f"{label:>14}" for label, _ in columns))
        table: dict = {label: {} for label, _ in columns}
        for category in [*categories, "all"]:
            cells = []
            for label, figures in columns:
                if category == "all":
                    right = sum(figures.get(name, {}).get("right", 0) for name in categories)
                    total = sum(figures.get(name, {}).get("cases", 0) for name in categories)
                    value = right / total if total else None
                else:
                    value = figures.get(category, {}).get("accuracy")
                table[label][category] = value
                cells.append(f"{'-' if value is None else f'{value:.0%}':>14}")
            self.out.write(f"{category:<18}" + "".join(cells))
        live = {name: f"{right}/{cases}" for name, (cases, right) in sorted(traffic.by_category.items())}
        self.out.write(f"live traffic (train split, sampled at temperature 1), right/cases: {live}")
        return table

    def _staleness(self) -> dict:
        """What the learner did with the qualified trajectories it took, and the lag histogram of what it
        trained on (summed over the versions' `online.staleness`)."""
        from django.db.models import Count

        from apps.training.models import ModelVersion, OnlineConsumption, OnlineRun

        runs = OnlineRun.objects.filter(tenant=self.tenant, model_name=self.model)
        outcomes = dict(
            OnlineConsumption.objects.filter(run__in=runs).values_list("outcome").annotate(n=Count("pk"))
        )
        histogram: dict[int, int] = {}
        for metrics in ModelVersion.objects.filter(
            tenant=self.tenant, name=self.model, metrics__online__run__isnull=False
        ).values_list("metrics", flat=True):
            for lag, count in (metrics.get("online", {}).get("staleness") or {}).items():
                histogram[int(lag)] = histogram.get(int(lag), 0) + count
        trained, stale = outcomes.get("trained", 0), outcomes.get("stale", 0)
        uniform = outcomes.get("uniform", 0)
        share = trained / (trained + stale) if trained + stale else None
        self.out.write(
            f"\nlearner: trained on {trained} of {trained + stale} qualified trajectories it took"
            f" ({'-' if share is None else f'{share:.0%}'}), {stale} dropped as stale, "
            f"{outcomes.get('waiting', 0)} still waiting, {outcomes.get('empty', 0)} with nothing to train"
            + (
                f", {uniform} in groups whose answers all scored alike (no signal: not trained)"
                if uniform
                else ""
            )
        )
        total = sum(histogram.values())
        self.out.write("trained samples by lag (training steps along the lineage between the version that")
        self.out.write("sampled the oldest token and the learner's):")
        for lag in sorted(histogram):
            self.out.write(f"  lag {lag:>2} {bar(histogram[lag], total, 30)} {histogram[lag]}")
        return {
            "trained": trained,
            "stale": stale,
            "waiting": outcomes.get("waiting", 0),
            "empty": outcomes.get("empty", 0),
            "uniform": uniform,
            "trained_share": share,
            "lag_histogram": {str(lag): histogram[lag] for lag in sorted(histogram)},
        }


def _gate_tag(gate: dict) -> str:
    return f"{'+'.join(gate['categories'])}-first{gate['cases']}"
