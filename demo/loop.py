"""The demo's loop: the weather agent's evolution policy (apps.evolution), its first learner, the control
plane's tick run here every second, and the timeline of its decisions. What to evaluate, release, promote or
restart is the control plane's to decide; the demo only watches, measures the base, and at the end aborts a
release its budget cut short and stops the learner.
"""

from django.core.management.base import CommandError

# The scenario policy's thresholds: a tool failing for a third of the cities fails about a quarter of the
# tool results, the default world about one in twenty (a wrong city); drift as workers/evolution/drift.py.
SCENARIO_TOOL_FAILURE_RATE = 0.15
SCENARIO_DRIFT_JS = 0.1


class LoopMixin:
    """Part of demo.run.Demo (whose __init__ declares the state): `policy`, `seen`, `production_number`."""

    def _gate(self) -> dict:
        """The policy's gate: the demo's held-out weather cases; a candidate must not be worse than the best
        version production has had by more than DEMO_TOLERANCE (tolerances do not add up)."""
        return {
            "environment": "weather",
            "cases": self.demo_config.heldout_cases,
            "seed": 10_000 + self.seed,
            "min_gain": -self.demo_config.tolerance,
        }

    def _policy_create(self):
        """The weather agent's policy: automatic, promotions approved by the policy (DEMO_APPROVE=manual: by
        one operator), the online run's recipe, the gate, and the canary plan with the demo's guardrails."""
        from apps.audit.services import Actor
        from apps.evolution.policies import policy_create

        settings = self.demo_config
        self.policy = policy_create(
            tenant=self.tenant,
            actor=Actor.system("demo"),
            model=self.model,
            mode="auto",
            approval_mode="one_operator" if settings.approve_manually else "automatic",
            **self._watching(),
            recipe={
                "learning_rate": settings.learning_rate,
                "std_level": "batch",
                "behaviour_weight_cap": 5.0,
                "micro_batch_tokens": settings.micro_batch_tokens,
                "seed": self.seed,
                "samples_per_step": settings.batch,
                "publish_every": settings.publish_every,
                "staleness_bound": settings.eta,
                **({} if settings.rollout_bound is None else {"rollout_bound": settings.rollout_bound}),
                "evaluate_every": settings.eval_every,
                **self._grouping(),
            },
            gate=self._gate(),
            release_plan={
                "stages": [settings.canary_percent],
                "stage_min_seconds": settings.canary_seconds,
                "failure_limit": 1,
                "inconclusive_limit": settings.canary_patience,
                "guardrails": [
                    {
                        "metric": "reward_mean",
                        "direction": "higher_is_better",
                        "threshold": 0.25,
                        "min_samples": 10,
                    },
                    # A drop that a short canary can tell from noise, however small: the point threshold
                    # alone let a candidate 16 % → 0 % through on a base near 20 % (bench/evolution).
                    {
                        "metric": "reward_mean",
                        "direction": "higher_is_better",
                        "threshold": 0.0,
                        "min_samples": 10,
                        "judge": "interval",
                    },
                    {
                        "metric": "error_rate",
                        "direction": "lower_is_better",
                        "threshold": 0.05,
                        "min_samples": 10,
                    },
                ],
            },
            compute_budget_seconds=24 * 3600,
        )
        self._say(
            f"evolution policy {self.policy.pk} for {self.model}: automatic, promotions approved "
            f"{'by an operator' if settings.approve_manually else 'by the policy'}; evaluate every "
            f"{settings.eval_every} versions on {settings.heldout_cases} held-out cases (tolerance "
            f"{settings.tolerance:.0%}), canary at {settings.canary_percent:g}% for ≥ {settings.canary_seconds}s"
        )

    def _grouping(self) -> dict:
        """The learner's GRPO grouping settings beyond the defaults (the weather desk: none)."""
        return {}

    def _watching(self) -> dict:
        """What the policy watches. The demo as it was: nothing (its learner runs from the start). Under a
        scenario (DEMO_SCENARIO): tool failures and drift over a one-minute window, with weight and harness
        updates allowed, so the control plane itself must notice what the scenario switches."""
        if not self.demo_config.scenario:
            return {"signals": {}, "update_kinds": ["weights"], "cooldown_seconds": 0}
        return {
            "signals": {
                "tool_failure_rate": {"op": ">", "threshold": SCENARIO_TOOL_FAILURE_RATE},
                "drift_js": {"op": ">", "threshold": SCENARIO_DRIFT_JS},
            },
            "update_kinds": ["weights", "harness"],
            "window_seconds": 60,
            "cooldown_seconds": 60,
        }

    def _learns_from_the_start(self) -> bool:
        """The demo's learner starts at once, except under a scenario where the control plane must decide to
        train itself (all but bad_release, whose rollback restarts a running learner)."""
        return self.demo_config.scenario in {"", "bad_release"}

    def _first_learner(self) -> None:
        """The first learner starts through a `train` decision, as the control plane's own would."""
        from apps.audit.services import Actor
        from apps.evolution.decisions import decision_record
        from apps.loop.actions import decision_execute

        if not self._learns_from_the_start():
            self._say("no learner yet: under this scenario the control plane decides when to train")
            return
        decision = decision_record(
            tenant=self.tenant,
            policy=self.policy,
            kind="train",
            reason="the demo starts learning from production",
            actor=Actor.system("demo"),
        )
        decision_execute(tenant=self.tenant, decision=decision)
        settings = self.demo_config
        self._timeline()
        self._say(
            f"online decoupled PPO: η={settings.eta}, "
            + ("" if settings.rollout_bound is None else f"ρ={settings.rollout_bound}, ")
            + f"{settings.batch} samples per step, a version every "
            f"{settings.publish_every} step(s); releases decide what serves"
        )

    def _loop(self, traffic) -> None:
        """Every second: one tick of the control plane, the new decisions on the timeline, the status line."""
        from apps.loop.control import evolution_tick

        while not self.stopping.is_set() and self._loop_seconds() < self.budget:
            if not self._alive():
                raise CommandError("a process of the stack exited; see var/demo/logs")
            evolution_tick(tenant=self.tenant, policy=self.policy)
            self._timeline()
            learner = self._learner()
            if learner is not None:
                self._status(learner, traffic)
            self.stopping.wait(1.0)
        self.out.write("")

    def _learner(self):
        """The running online run of the demo's model; None between a stop and a restart. A failed one ends
        the demo (its error)."""
        from apps.training.choices import OnlineRunStatus
        from apps.training.online import online_run_active, online_run_list

        active = online_run_active(tenant=self.tenant)
        if active is not None and active.model_name == self.model:
            return active
        last = online_run_list(tenant=self.tenant).filter(model_name=self.model).first()
        if last is not None and last.status == OnlineRunStatus.FAILED:
            raise CommandError(f"the online run failed: {last.error[-400:]}")
        return None

    def _timeline(self) -> None:
        """Prints each decision once per status it reaches, and adds the table's rows as they end."""
        from apps.evolution.selectors import decision_timeline

        for decision in decision_timeline(tenant=self.tenant, policy=self.policy):
            if self.seen.get(decision.pk) == decision.status:
                continue
            self.seen[decision.pk] = decision.status
            self.out.write("")
            self._say(self._decision_line(decision))
            self._settle(decision)

    def _decision_line(self, decision) -> str:
        subject = f" v{decision.version.number}" if decision.version_id else ""
        text = decision.outcome or decision.reason
        line = f"decision {decision.pk} {decision.kind}{subject}: {decision.status} — {text}"
        release_id = decision.evidence.get("release") or next(
            iter(decision.started.get("releases", [])), None
        )
        if decision.kind == "release" and decision.status == "running":
            percent = self.demo_config.canary_percent
            line += f"; canary at {percent:g}% of new sessions ({self.url}/releases/{release_id}/)"
        if decision.kind == "promote" and decision.status == "proposed":
            line += (
                f"; release {release_id} passed its canary and waits for an operator: approve it at "
                f"{self.url}/releases/{release_id}/"
            )
        return line

    def _settle(self, decision) -> None:
        """Rows of the final table: a candidate the gate rejected, and how each release ended."""
        from apps.releases.selectors import release_get

        evidence = decision.evidence
        if decision.kind == "evaluate" and decision.status == "succeeded":
            score = evidence["gate_score"]
            self.curve.append(
                {
                    "version": decision.version.number,
                    "seconds": round(self._loop_seconds(), 1),
                    "heldout": score,
                }
            )
            if not evidence.get("passed"):
                self._row(decision.version.number, "rejected", score)
        if decision.kind == "release" and evidence.get("release_status"):
            release = release_get(tenant=self.tenant, release_id=evidence["release"])
            extra = {"release": release.pk}
            if release.approved_by:
                extra["approved_by"] = release.approved_by
            role = release.status.replace("_", " ")
            self._row(release.candidate.number, role, evidence.get("gate_score", 0.0), **extra)

    def _close(self) -> None:
        """The loop ended (budget, Ctrl-C or a failure): a release under way is aborted (production keeps
        serving), its decision settled, and the learner asked to stop."""
        from apps.audit.services import Actor
        from apps.evolution.decisions import decision_finish
        from apps.evolution.selectors import decisions_in_status
        from apps.loop.actions import decision_follow
        from apps.releases.choices import ACTIVE_STATUSES
        from apps.releases.selectors import release_list
        from apps.releases.services import release_abort
        from apps.training.online import online_run_active, online_run_stop

        actor = Actor.system("demo")
        for release in release_list(tenant=self.tenant, model=self.model).filter(status__in=ACTIVE_STATUSES):
            try:
                release_abort(
                    tenant=self.tenant,
                    actor=actor,
                    release_id=release.pk,
                    reason="the demo's loop ended before the release finished",
                )
            except Exception as error:  # it may have finished meanwhile (promoted or rolled back): say so
                self._say(f"release {release.pk} was not aborted: {error}")
        if getattr(self, "policy", None) is not None:
            for decision in decisions_in_status(tenant=self.tenant, policy=self.policy, status="running"):
                if decision.kind == "release":
                    decision_follow(tenant=self.tenant, decision=decision)
                else:  # a gate still measuring, a learner still stopping: nothing is left running
                    decision_finish(
                        tenant=self.tenant,
                        decision_id=decision.pk,
                        succeeded=False,
                        outcome="the demo's loop ended before it finished",
                    )
            self._timeline()
        learner = online_run_active(tenant=self.tenant)
        if learner is not None and learner.model_name == self.model:
            online_run_stop(tenant=self.tenant, actor=actor, run_id=learner.pk)

    def _measure(self, version, *, label: str) -> float:
        """The held-out success of `version` by the policy's gate (stored in its metrics, so the control
        plane's gate reads the base's score instead of measuring it again)."""
        from apps.loop.actions import gate_measure

        self._since()
        success = gate_measure(tenant=self.tenant, version=version, gate=self._gate())
        version.refresh_from_db()
        reasons = version.metrics.get("heldout", {}).get("reasons", {})
        self.curve.append(
            {"version": version.number, "seconds": round(self._loop_seconds(), 1), "heldout": success}
        )
        self._say(
            f"held-out success of {label} v{version.number}: {success:.0%} on "
            f"{self.demo_config.heldout_cases} cases {dict(sorted(reasons.items()))}"
        )
        if label == "base":
            self.production_number = version.number
            self._row(version.number, "base", success)
        return success
