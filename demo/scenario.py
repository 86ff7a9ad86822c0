"""A scenario for the evolution control plane on the demo's stack (DEMO_SCENARIO, DEMO_SCENARIO_AT): the world
the simulated traffic consults (workers/envs/scenarios.py), the host's part of its switches, and the
scenario's section of the JSON summary (read by bench/evolution).

- `scenario_world(demo_config)`: the `World` of DEMO_SCENARIO (None without one: the demo as it was),
  handed to `Traffic(world=)`, whose start starts the scenario's clock.
- `ScenarioDriver`: a thread that carries out what the world asks of the host. `bad_release`: once
  production's held-out success reaches the request's `production_success`, a degraded copy of production's
  checkpoint (`write_degraded_checkpoint`) registered as a candidate version, and a
  `release` decision for it recorded under the demo's evolution policy, as an operator who pushes a release
  past the gate would; the control plane carries it out, its canary breaks a guardrail, and the control
  plane is expected to roll back and restart the learner from production. The driver notes
  `bad_release_sent` in the world's events when it sent it (the bench measures the reaction from there).
- `scenario_summary_write(...)`: adds `scenario` (name, expectation, switches with their times, what the
  host carried out, the demo's policy and how many signal points its ticks stored),
  `decisions` (every decision of the run's model, with unix times and seconds since the scenario's
  start) and `live_success` (live success by 30 s bucket) to the summary the table wrote.
"""

import json
import threading
import time
from pathlib import Path

from django.conf import settings

from demo.config import DemoConfig


def scenario_world(demo_config: DemoConfig):
    from workers.envs.scenarios import World, scenario_named

    scenario = scenario_named(demo_config.scenario, at=demo_config.scenario_at)
    return None if scenario is None else World(scenario)


def _policy(tenant, model: str):
    """The demo's evolution policy for its model, if the control plane made one (read directly, as the
    demo reads its other few rows; see the README)."""
    from apps.evolution.models import EvolutionPolicy

    return EvolutionPolicy.objects.for_tenant(tenant).filter(model=model).order_by("pk").first()


class ScenarioDriver:
    """Carries out the host's switches of a world (see the module's docstring) every second, in a thread."""

    def __init__(self, *, tenant, model: str, run_dir: Path, world, say):
        self.tenant, self.model, self.run_dir, self.world, self.say = tenant, model, run_dir, world, say
        self.done: list[dict] = []  # what was carried out: merged into the summary's scenario events
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-scenario", daemon=True)

    def start(self) -> "ScenarioDriver":
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout=timeout)

    def _run(self) -> None:
        from django.db import connection

        waiting: list[dict] = []
        try:
            while not self._stop.wait(1.0):
                waiting.extend(self.world.take_requests("bad_release"))
                for request in list(waiting):
                    try:
                        if not self._production_ready(request):
                            continue
                        waiting.remove(request)
                        done = self._bad_release(request)
                        self.done.append(done)
                        self.world.note("bad_release_sent", {"version": done["version"]})
                    except Exception as error:  # noqa: BLE001  (the run goes on; the summary says why)
                        waiting.remove(request)
                        self.say(f"scenario bad_release failed: {type(error).__name__}: {error}")
                        self.done.append(
                            {"what": "bad_release_failed", "error": f"{type(error).__name__}: {error}"[:500]}
                        )
        finally:
            connection.close()

    def _production_ready(self, request: dict) -> bool:
        """Whether production's held-out success (measured by the control plane's `evaluate`, or by the
        warm-up for the base) has reached the request's `production_success`: the bad release waits for it,
        saying so once."""
        from apps.training.selectors import alias_resolve

        wanted = float((request.get("value") or {}).get("production_success", 0.0))
        if wanted <= 0:
            return True
        production = alias_resolve(tenant=self.tenant, name=self.model, alias="production")
        heldout = (production.metrics or {}).get("heldout") or {}
        success = heldout.get("success")
        if success is not None and float(success) >= wanted:
            return True
        if not request.get("announced"):
            request["announced"] = True
            self.say(
                f"scenario bad_release: waits for production held-out success ≥ {wanted:.0%} "
                f"(v{production.number}: {'unmeasured' if success is None else f'{float(success):.0%}'})"
            )
        return False

    def _bad_release(self, request: dict) -> dict:
        from apps.audit.services import Actor
        from apps.evolution.choices import DecisionKind
        from apps.evolution.decisions import decision_record
        from apps.training.selectors import alias_resolve
        from apps.training.services import model_version_register
        from workers.envs.scenarios import write_degraded_checkpoint

        value = request.get("value") or {}
        actor = Actor.system("scenario bad_release")
        production = alias_resolve(tenant=self.tenant, name=self.model, alias="production")
        out = self.run_dir / f"degraded-of-v{production.number}-{int(request['at'])}"
        write_degraded_checkpoint(
            production.checkpoint_path,
            out,
            noise=float(value.get("noise", 0.25)),
            seed=int(value.get("seed", 0)),
        )
        version = model_version_register(
            tenant=self.tenant,
            actor=actor,
            name=self.model,
            checkpoint_path=str(out),
            tokenizer_hash=production.tokenizer_hash,
            parent=production,
            description=f"scenario bad_release: v{production.number} with noise {value.get('noise', 0.25)}",
        )
        policy = _policy(self.tenant, self.model)
        if policy is None:
            self.say(
                f"scenario bad_release: v{version.number} registered, but no evolution policy releases it"
            )
            return {
                "what": "bad_release_registered",
                "version": version.number,
                "decision": None,
                "at": time.time(),
            }
        decision = decision_record(
            tenant=self.tenant,
            policy=policy,
            kind=DecisionKind.RELEASE,
            reason=f"scenario bad_release: an operator releases v{version.number}, a degraded copy of production",
            evidence={"scenario": "bad_release", "degraded_of": production.number, **value},
            actor=actor,
            version=version,
        )
        self.say(f"scenario bad_release: v{version.number} (degraded v{production.number}) sent to release")
        return {
            "what": "bad_release_recorded",
            "version": version.number,
            "decision": decision.pk,
            "at": time.time(),
        }


def _decisions(tenant, model: str, *, origin: float) -> list[dict]:
    """Every decision of the run's model (a new name in every run: weather, weather-2...), oldest first."""
    from apps.evolution.decisions import decision_payload
    from apps.evolution.models import Decision

    rows = (
        Decision.objects.for_tenant(tenant)
        .filter(policy__model=model)
        .select_related("version", "harness")
        .order_by("created_at", "id")
    )
    return [
        {
            **decision_payload(row),
            "at": row.created_at.timestamp(),
            "seconds": round(row.created_at.timestamp() - origin, 1),
        }
        for row in rows
    ]


def _control_plane(tenant, model: str) -> dict:
    """Whether the control plane ran for the run's model: its policy (mode, revision) and how many signal
    points its ticks stored (bench/evolution refuses to read figures from a run without them)."""
    from apps.evolution.models import SignalPoint

    policy = _policy(tenant, model)
    if policy is None:
        return {"policy": None, "signal_points": 0}
    return {
        "policy": {"id": policy.pk, "mode": policy.mode, "revision": policy.revision},
        "signal_points": SignalPoint.objects.for_tenant(tenant).filter(policy=policy).count(),
    }


def scenario_summary_write(*, demo_config: DemoConfig, tenant, model: str, world, traffic, driver) -> dict:
    """Adds the scenario's section to the summary the table wrote (see the module's docstring)."""
    from workers.envs.scenarios import success_timeline

    path = Path(demo_config.summary_path or str(Path(settings.VAR_DIR) / "demo-summary.json"))
    summary = json.loads(path.read_text()) if path.exists() else {}
    scenario = world.summary()
    scenario["host"] = list(driver.done) if driver is not None else []
    scenario.update(_control_plane(tenant, model))
    started = world.started_at if world.started_at is not None else time.time()
    with traffic.stats.lock:
        history = list(traffic.stats.history)
    summary.update(
        {
            "scenario": scenario,
            "decisions": _decisions(tenant, model, origin=started),
            "live_success": success_timeline(history, started_at=started),
        }
    )
    path.write_text(json.dumps(summary, indent=2))
    return summary
