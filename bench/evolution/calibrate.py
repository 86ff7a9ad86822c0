"""How hard each scenario hits a policy, without the stack or the control plane: held-out success of a checkpoint
(the demo's base, or any promoted version) in the default world, in each scenario's world once all its
switches are on (tool faults, the new phrasing, the new cities), and of degraded copies of it
(`write_degraded_checkpoint` at several noise levels: the bad release must break a guardrail yet still serve).

    .venv/bin/python -m bench.evolution.calibrate --base var/demo-cache/base-... [--cases 64] [--noise 0.1 0.25 0.5 1]

Use it to size a scenario before a bench run: a fault or a shift that costs a few points only is below what
the signals can tell from noise; a degraded copy at 0 % held-out looks like a broken backend rather than a
bad release.
"""

import argparse
import json
import tempfile
from pathlib import Path

from workers.envs import weather
from workers.envs.scenarios import FAULTY_CITIES, SCENARIOS, WEATHER_V2, World, write_degraded_checkpoint
from workers.envs.warmup import heldout_success

WORLD_SCENARIOS = ("tool_failure", "drift", "drift_cities")


class _AfterEverySwitch:
    """A clock that is at 0 when the world starts and past every switch afterwards."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def scenario_world_on(name: str) -> World:
    clock = _AfterEverySwitch()
    world = World(SCENARIOS[name], clock=clock).start()
    clock.now = 1e9
    return world


class _RoutedWorld(World):
    """`tool_failure`'s world as a harness route `get_weather → get_weather_v2` leaves it to the model (what
    the gateway does, simulated): the default tool list, and every `get_weather` call reaching v2."""

    def __init__(self):
        super().__init__()
        self.start()
        self.switch("offer_tools", [WEATHER_V2])
        self.switch("tool_faults", {weather.TOOL_NAME: list(FAULTY_CITIES)})

    def tool_result(self, task, name, arguments):
        return super().tool_result(task, WEATHER_V2 if name == weather.TOOL_NAME else name, arguments)


def calibrate(base: Path, *, cases: int, noises: list[float], seed: int, work_dir: Path) -> dict:
    tasks = weather.make_tasks(split="heldout", count=cases, seed=10_000 + seed)
    rows = {}
    measured = heldout_success(base, tasks, seed=seed)
    rows["default world"] = {"success": measured.success, "reasons": measured.reasons}
    for name in WORLD_SCENARIOS:
        world = scenario_world_on(name)
        measured = heldout_success(base, [world.shape(task) for task in tasks], seed=seed, world=world)
        rows[f"{name} (all switches on)"] = {"success": measured.success, "reasons": measured.reasons}
    measured = heldout_success(base, tasks, seed=seed, world=_RoutedWorld())
    rows["tool_failure routed to v2 (simulated)"] = {"success": measured.success, "reasons": measured.reasons}
    for noise in noises:
        degraded = write_degraded_checkpoint(base, work_dir / f"noise-{noise:g}", noise=noise, seed=seed)
        measured = heldout_success(degraded, tasks, seed=seed)
        rows[f"degraded, noise {noise:g}"] = {"success": measured.success, "reasons": measured.reasons}
    return {"base": str(base), "cases": cases, "seed": seed, "rows": rows}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="a checkpoint directory")
    parser.add_argument("--cases", type=int, default=64)
    parser.add_argument("--noise", type=float, nargs="*", default=[0.1, 0.25, 0.5, 1.0])
    parser.add_argument("--seed", type=int, default=0)
    arguments = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="evolution-calibrate-") as scratch:
        result = calibrate(
            arguments.base,
            cases=arguments.cases,
            noises=arguments.noise,
            seed=arguments.seed,
            work_dir=Path(scratch),
        )
    for label, row in result["rows"].items():
        reasons = ", ".join(f"{reason} {count}" for reason, count in sorted(row["reasons"].items()))
        print(f"{label:<40} {row['success']:>5.0%}  ({reasons})")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
