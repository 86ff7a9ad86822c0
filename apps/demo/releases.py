"""The demo's releases: the offline gate (a candidate not worse, within DEMO_TOLERANCE, than the best version
production has had), then a canary through apps.releases on the serving slot production does not use; a
release awaiting approval is approved by the demo (or, DEMO_APPROVE=manual, by an operator), one that ends is
settled, one under way when the loop ends is aborted.
"""


class ReleaseMixin:
    """Part of apps.demo.run.Demo (whose __init__ declares the state): `release`, `release_offline`."""

    def _release_start(self, version, success: float) -> None:
        """Offline gate, then a release: the candidate is loaded onto the slot not serving production and
        released over production (canary stage, guardrails); the beat's analysis ticks take it from there."""
        from apps.audit.services import Actor
        from apps.releases.services import release_create, release_start
        from apps.training.publication import model_version_publish

        production, _ = self.production
        # Against the best version production has had, not the current one: tolerances must not add up.
        best = max(row["heldout"] for row in self.rows if row["role"] in {"base", "promoted"})
        tolerance = self.demo_settings.tolerance
        if success < best - tolerance:
            self._say(
                f"v{version.number} is worse offline than the best production has had ({success:.0%} < "
                f"{best:.0%} − {tolerance:.0%}): not released; the learner starts again from production "
                f"v{production.number}"
            )
            self._row(version.number, "rejected", success)
            self._restart_learner()
            return
        actor = Actor.system("demo")
        # The slot not serving production (at the start both serve the base: the second one is taken).
        serving = [
            backend for backend in self.backends.values() if backend.model_version == str(production.number)
        ]
        free = next((backend for backend in self.backends.values() if backend not in serving), serving[-1])
        (outcome,) = model_version_publish(
            tenant=self.tenant, actor=actor, version=version, backend_ids=[free.pk]
        )
        if not outcome.ok:
            self._say(f"loading v{version.number} onto {free.name} failed: {outcome.error}")
            return
        free.model_version = str(version.number)
        percent = self.demo_settings.canary_percent
        release = release_create(
            tenant=self.tenant,
            actor=actor,
            candidate_id=version.pk,
            baseline_id=production.pk,
            stages=[percent],
            stage_min_seconds=self.demo_settings.canary_seconds,
            failure_limit=1,
            inconclusive_limit=30,
            guardrails=[
                {
                    "metric": "reward_mean",
                    "direction": "higher_is_better",
                    "threshold": 0.25,
                    "min_samples": 10,
                },
                {
                    "metric": "error_rate",
                    "direction": "lower_is_better",
                    "threshold": 0.05,
                    "min_samples": 10,
                },
            ],
        )
        self.release = release_start(tenant=self.tenant, actor=actor, release_id=release.pk)
        self.release_offline = success
        self._say(
            f"release {release.pk}: v{version.number} ({success:.0%} offline) loaded on {free.name}, canary "
            f"at {percent:g}% of new sessions over production v{production.number} "
            f"({self.url}/releases/{release.pk}/)"
        )

    def _follow_release(self) -> None:
        """Approves a release awaiting approval (DEMO_APPROVE=manual: an operator does, in the console), and
        settles one that ended: promoted → production, rolled back → noted; a paused one is aborted."""
        from apps.audit.services import Actor
        from apps.releases.models import ReleaseStatus
        from apps.releases.selectors import release_get
        from apps.releases.services import release_abort, release_approve

        release = release_get(tenant=self.tenant, release_id=self.release.pk)
        if release.status == ReleaseStatus.AWAITING_APPROVAL:
            if self.demo_settings.approve_manually:
                if self.release.status != release.status:
                    self.out.write("")
                    self._say(
                        f"release {release.pk} (v{release.candidate.number}) passed its canary and waits for "
                        f"an operator: approve it at {self.url}/releases/{release.pk}/"
                    )
            else:
                release = release_approve(
                    tenant=self.tenant, actor=Actor.system("demo auto-approval"), release_id=release.pk
                )
        elif release.status == ReleaseStatus.PAUSED:
            release = release_abort(
                tenant=self.tenant,
                actor=Actor.system("demo"),
                release_id=release.pk,
                reason="the canary stayed inconclusive; the demo moves on",
            )
        self.release = release
        if release.status == ReleaseStatus.PROMOTED:
            self.production = (release.candidate, self.release_offline)
            self._row(
                release.candidate.number,
                "promoted",
                self.release_offline,
                release=release.pk,
                approved_by=release.approved_by,
            )
            self.out.write("")
            self._say(
                f"release {release.pk}: v{release.candidate.number} promoted by {release.approved_by}; it now "
                f"serves every new session"
            )
        elif release.status in {ReleaseStatus.ROLLED_BACK, ReleaseStatus.ABORTED}:
            self._row(
                release.candidate.number,
                release.status.replace("_", " "),
                self.release_offline,
                release=release.pk,
            )
            self.out.write("")
            self._say(
                f"release {release.pk}: v{release.candidate.number} {release.status.replace('_', ' ')} "
                f"({release.status_reason})"
            )
        if release.status in {ReleaseStatus.PROMOTED, ReleaseStatus.ROLLED_BACK, ReleaseStatus.ABORTED}:
            self.release = None

    def _release_close(self) -> None:
        """The loop ended (budget, Ctrl-C or a failure) during a release: it is aborted and production keeps
        serving, so nothing is left half-done in the database."""
        from apps.audit.services import Actor
        from apps.releases.services import release_abort

        try:
            release = release_abort(
                tenant=self.tenant,
                actor=Actor.system("demo"),
                release_id=self.release.pk,
                reason="the demo's loop ended before the release finished",
            )
        except Exception as error:  # it may have finished meanwhile (promoted or rolled back): say so
            self._say(f"release {self.release.pk} was not aborted: {error}")
        else:
            self._row(release.candidate.number, "aborted", self.release_offline, release=release.pk)
            self._say(f"release {release.pk} (v{release.candidate.number}) aborted: the loop ended")
        self.release = None
