"""The demo's loop: the online run that learns (started, stopped, restarted from production when a candidate
fails the offline gate), the held-out measurement of versions, and the turns that decide when to evaluate
the newest version and when to follow the release under way (apps/demo/releases.py).
"""

import time

from django.core.management.base import CommandError


class LoopMixin:
    """Part of apps.demo.run.Demo (whose __init__ declares the state): `learner`, `run_ids`, `production`."""

    def _loop(self, traffic) -> None:
        """Every DEMO_EVAL_EVERY versions (while no release is under way) the newest is evaluated offline and,
        if not worse than production within DEMO_TOLERANCE, released; a release under way is followed."""
        from apps.training.online import online_run_get

        eval_every = self.demo_settings.eval_every
        last_evaluated = self.learner.base_version.number
        while not self.stopping.is_set() and self._loop_seconds() < self.budget:
            if not self._alive():
                raise CommandError("a process of the stack exited; see var/demo/logs")
            current = online_run_get(tenant=self.tenant, run_id=self.learner.pk)
            if current.status != "running":
                raise CommandError(f"the online run stopped: {current.error[-400:]}")
            version = current.current_version
            if self.release is not None:
                self._follow_release()
            elif version.number - last_evaluated >= eval_every:
                last_evaluated = version.number
                success = self._measure(version, label="candidate")
                self._release_start(version, success)
            self._status(current, traffic)
            self.stopping.wait(1.0)
        self.out.write("")
        if self.release is not None:
            self._release_close()

    def _start_online(self, base):
        from apps.audit.services import Actor
        from apps.training.online import online_run_start

        eta = self.demo_settings.eta
        batch = self.demo_settings.batch
        run = online_run_start(
            tenant=self.tenant,
            actor=Actor.system("demo"),
            base_version=base,
            hyperparameters={
                "learning_rate": self.demo_settings.learning_rate,
                "std_level": "batch",
                "behaviour_weight_cap": 5.0,
                "micro_batch_tokens": 8192,
                "seed": self.seed,
            },
            samples_per_step=batch,
            publish_every=self.demo_settings.publish_every,
            staleness_bound=eta,
            publish_to_backends=False,
        )
        self.run_ids.append(run.pk)
        self._say(
            f"online decoupled PPO from v{base.number}: η={eta}, {batch} samples per step, a version every "
            f"{run.publish_every} step(s); releases decide what serves"
        )
        return run

    def _stop_online(self, run) -> None:
        from apps.audit.services import Actor
        from apps.training.online import online_run_stop

        online_run_stop(tenant=self.tenant, actor=Actor.system("demo"), run_id=run.pk)

    def _restart_learner(self) -> None:
        """A candidate failed the offline gate: the learner has drifted, and its data (served by production,
        now ever further behind it) would soon all be older than η. It starts again from production."""
        from apps.training.models import OnlineRun, OnlineRunStatus

        self._stop_online(self.learner)
        deadline = time.monotonic() + 120
        while OnlineRun.objects.filter(pk=self.learner.pk, status=OnlineRunStatus.RUNNING).exists():
            if time.monotonic() > deadline or self.stopping.is_set():
                raise CommandError(f"online run {self.learner.pk} did not stop within two minutes")
            time.sleep(0.5)
        self.learner = self._start_online(self.production[0])

    def _measure(self, version, *, label: str) -> float:
        from apps.training.services import model_version_update_metrics
        from workers.envs.warmup import heldout_success

        self._since()
        result = heldout_success(version.checkpoint_path, self.heldout, seed=self.seed)
        model_version_update_metrics(
            tenant=self.tenant,
            version_id=version.pk,
            metrics={
                "heldout": {"success": result.success, "cases": result.cases, "reasons": result.reasons}
            },
        )
        elapsed = self._loop_seconds()
        self.curve.append(
            {"version": version.number, "seconds": round(elapsed, 1), "heldout": result.success}
        )
        self.out.write("")
        self._say(
            f"held-out success of {label} v{version.number}: {result.success:.0%} on {result.cases} cases "
            f"{dict(sorted(result.reasons.items()))}"
        )
        if label == "base":
            self.production = (version, result.success)
            self._row(version.number, "base", result.success)
        return result.success
