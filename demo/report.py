"""What the demo prints and writes: timestamped lines, the live status line, the rows of the final table (a
version, what became of it, its held-out success), the held-out curve, and the table and JSON summary at the
end (DEMO_SUMMARY, default demo-summary.json in the var directory).
"""

import json
import time
from pathlib import Path

from django.conf import settings


def bar(done: float, total: float, width: int = 28) -> str:
    filled = int(width * min(max(done / total, 0.0), 1.0)) if total else width
    return "[" + "#" * filled + "." * (width - filled) + "]"


class ReportMixin:
    """Part of demo.run.Demo (whose __init__ declares the state): `rows`, `curve`, and the clocks."""

    def _say(self, text: str) -> None:
        self.out.write(f"[{time.monotonic() - self.started:6.1f}s] {text}")

    def _status(self, run, traffic) -> None:
        stats = traffic.stats
        success = stats.recent_success()
        reward = stats.recent_reward()
        elapsed = self._loop_seconds()
        line = (
            f"\r{bar(elapsed, self.budget, 20)} {elapsed:5.0f}s  v{run.current_version.number}  "
            f"steps {run.steps}  trajectories {stats.episodes}  tokens {self._tokens():,}  "
            f"prod v{self._production_number()}  {self._release_label()}  "
            f"live success {'-' if success is None else f'{success:.0%}'}  "
            f"reward {'-' if reward is None else f'{reward:.2f}'}  stale {run.dropped_stale}  "
            f"held back {stats.held_back}   "
        )
        self.out.write(line, ending="")
        self.out.flush()

    def _production_number(self) -> int:
        from apps.training.selectors import alias_resolve

        production = alias_resolve(tenant=self.tenant, name=self.model, alias="production")
        return production.number if production else self.production_number

    def _release_label(self) -> str:
        """The release of the demo's model under way, if any."""
        from apps.releases.choices import ACTIVE_STATUSES
        from apps.releases.selectors import release_list

        release = (
            release_list(tenant=self.tenant, model=self.model).filter(status__in=ACTIVE_STATUSES).first()
        )
        if release is None:
            return "no release"
        return f"release v{release.candidate.number}: {release.status}"

    def _tokens(self) -> int:
        from django.db.models import Sum

        from apps.trajectories.models import Trajectory

        totals = (
            Trajectory.objects.for_tenant(self.tenant)
            .filter(started_at__gte=self._since())
            .aggregate(prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens"))
        )
        return (totals["prompt"] or 0) + (totals["completion"] or 0)

    def _since(self):
        if not hasattr(self, "_since_at"):
            from django.utils import timezone

            self._since_at = timezone.now()
        return self._since_at

    def _row(self, version_number: int, role: str, heldout: float, **extra) -> None:
        """A row of the final table (and of the summary): a version, what became of it, its held-out success."""
        self.rows.append(
            {
                "version": version_number,
                "role": role,
                "heldout": heldout,
                "seconds": round(self._loop_seconds(), 1),
                **extra,
            }
        )

    def _loop_seconds(self) -> float:
        return 0.0 if self.loop_started is None else time.monotonic() - self.loop_started

    def _table(self, traffic, annotator) -> None:
        from django.db.models import Sum

        from apps.training.models import OnlineRun

        runs = OnlineRun.objects.filter(tenant=self.tenant, model_name=self.model)
        final = runs.aggregate(steps=Sum("steps"), stale=Sum("dropped_stale"))
        online_runs = runs.count()
        wall = time.monotonic() - self.started
        tokens = self._tokens()
        warmup = "reused" if self.base_reused else f"{self.warmup_seconds:.0f}s"
        self.out.write("\n" + "version  role         held-out success  at (s, loop)")
        for row in self.rows:
            self.out.write(
                f"v{row['version']:<7} {row['role']:<12} {row['heldout']:>15.0%}  {row['seconds']:>6.0f}"
            )
        served = [row for row in self.rows if row["role"] in {"base", "promoted"}]
        gain = (served[-1]["heldout"] - served[0]["heldout"]) if served else 0.0
        self.out.write(
            f"trajectories {traffic.stats.episodes}  tokens {tokens:,}  training steps {final['steps']}  "
            f"stale dropped {final['stale']}  online runs {online_runs}  "
            f"held back {traffic.stats.held_back}  "
            f"loop {self._loop_seconds():.0f}s  warm-up {warmup}  wall time {wall:.0f}s  "
            f"gain {gain * 100:+.0f} points"
        )
        problems = annotator.stats
        self.out.write(
            f"annotator: {problems.labelled} labelled, {problems.skipped} skipped through the annotation API"
            + (f", {problems.errors} errors (last: {problems.last_problem})" if problems.errors else "")
        )
        if traffic.stats.rejected_rewards or traffic.stats.errors:
            self.out.write(
                f"rewards refused {traffic.stats.rejected_rewards}, episode errors {traffic.stats.errors}"
                f"{'  (last: ' + traffic.stats.last_problem + ')' if traffic.stats.last_problem else ''}"
            )
        summary = {
            "seed": self.seed,
            "model": self.model,
            "rows": self.rows,
            "curve": self.curve,
            "trajectories": traffic.stats.episodes,
            "tokens": tokens,
            "steps": final["steps"],
            "dropped_stale": final["stale"],
            "online_runs": online_runs,
            "decisions": self._decisions_summary(),
            "held_back": traffic.stats.held_back,
            "wall_seconds": round(wall, 1),
            "loop_seconds": round(self._loop_seconds(), 1),
            "warmup_seconds": round(self.warmup_seconds, 1),
            "base_reused": self.base_reused,
            "annotator_labels": annotator.stats.labelled,
            "gain_points": round(gain * 100, 1),
        }
        path = self.demo_config.summary_path or str(Path(settings.VAR_DIR) / "demo-summary.json")
        Path(path).write_text(json.dumps(summary, indent=2))
        self.out.write(f"summary: {path}")

    def _decisions_summary(self) -> list[dict]:
        """Every decision of the demo's policy: kind, version, status, outcome and the gate's figures."""
        from apps.evolution.selectors import decision_timeline

        if getattr(self, "policy", None) is None:
            return []
        keys = ("gate_score", "best_production_score", "passed", "release", "release_status")
        return [
            {
                "id": decision.pk,
                "kind": decision.kind,
                "version": decision.version.number if decision.version_id else None,
                "status": decision.status,
                "outcome": decision.outcome,
                "parent": decision.parent_id,
                **{key: decision.evidence[key] for key in keys if key in decision.evidence},
            }
            for decision in decision_timeline(tenant=self.tenant, policy=self.policy)
        ]
