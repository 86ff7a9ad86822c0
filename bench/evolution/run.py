"""The evolution control plane under scenarios: `python -m demo` with DEMO_SCENARIO=<name> and DEMO_EXIT=1 for each
scenario of workers.envs.scenarios.SCENARIOS, on the full stack (web, workers, beat, embedded inference
servers, the control plane's ticks). Reads each run's summary (the scenario's switches with their times, the
control plane's decisions with theirs, live success by 30 s) and prints: the reaction time (the trigger
switched → the first decision of an expected kind), whether the expected decisions came in time, false
alarms (alarm-kind decisions while nothing had been switched: the whole run for `stationary`), and live
success before the trigger and at the end.

    .venv/bin/python bench/evolution/run.py [--scenarios tool_failure drift bad_release stationary]
        [--seed 0] [--at 60] [--budget SECONDS] [--scratch DIR]

A summary without decisions, without the demo's evolution policy, or without a single signal tick fails
loudly (exit status 2): the control plane did not run, which is not a pass for `stationary` either.
Exit status 0 when every scenario met its expectation, 1 otherwise.
"""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.demo.process import run_demo  # noqa: E402
from workers.envs.scenarios import ALARM_KINDS, scenario_named  # noqa: E402

SETTLE_SECONDS = 30.0  # decisions this soon after the traffic starts are the loop's set-up, not alarms
SUCCESS_WINDOW = 60.0  # live success is compared over this many seconds before the trigger and at the end


class NoControlPlane(RuntimeError):
    """The summary shows that the control plane did not run (no policy, no tick, or no decision at all)."""


def _weighted(buckets: list[dict], start: float, end: float) -> float | None:
    inside = [bucket for bucket in buckets if start <= bucket["seconds"] < end and bucket["episodes"]]
    episodes = sum(bucket["episodes"] for bucket in inside)
    return sum(bucket["success"] * bucket["episodes"] for bucket in inside) / episodes if episodes else None


def analyse(summary: dict, *, settle_seconds: float = SETTLE_SECONDS) -> dict:
    """What one scenario's run shows against its expectation (see the module's docstring). Raises
    NoControlPlane when the summary cannot say anything about the control plane."""
    scenario = summary.get("scenario")
    if not scenario:
        raise NoControlPlane("the summary has no scenario section: was DEMO_SCENARIO passed to the demo?")
    if "decisions" not in summary:
        raise NoControlPlane("the summary has no decisions: the demo wrote no scenario section")
    if not scenario.get("policy"):
        raise NoControlPlane("the demo's model has no evolution policy: the control plane did not run")
    if not scenario.get("signal_points"):
        raise NoControlPlane("no signal point was recorded: the control plane never ticked")
    decisions = [
        decision
        for decision in summary["decisions"]
        if "scenario" not in (decision.get("decided_by") or "")  # the scenario's own pushes are not reactions
    ]
    if not decisions and scenario["name"] != "stationary":
        raise NoControlPlane(f"{scenario['name']}: the control plane took no decision at all")
    host_failures = [
        entry for entry in scenario.get("host") or [] if entry.get("what", "").endswith("_failed")
    ]
    if host_failures:
        raise NoControlPlane(
            f"{scenario['name']}: the demo could not carry out its switch: {host_failures[0]['error']}"
        )
    expects = scenario["expects"]
    trigger = next((event for event in scenario["events"] if event["what"] == expects.get("after")), None)
    trigger_seconds = trigger["seconds"] if trigger else None
    quiet_until = trigger_seconds if trigger_seconds is not None else float("inf")
    false_alarms = [
        decision
        for decision in decisions
        if decision["kind"] in ALARM_KINDS and settle_seconds <= decision["seconds"] < quiet_until
    ]
    result = {
        "scenario": scenario["name"],
        "trigger_seconds": trigger_seconds,
        "expected": expects.get("kinds") or [],
        "within_seconds": expects.get("within_seconds"),
        "decisions": [f"{d['kind']}@{d['seconds']:.0f}s:{d['status']}" for d in decisions],
        "false_alarms": len(false_alarms),
        "reaction_seconds": None,
        "reacted": None,
        "then": {},
        "success_before": None,
        "success_after": None,
        "recovered": None,
    }
    buckets = summary.get("live_success") or []
    end = max((bucket["seconds"] for bucket in buckets), default=0.0) + 30.0
    if trigger_seconds is not None:
        result["success_before"] = _weighted(buckets, trigger_seconds - SUCCESS_WINDOW, trigger_seconds)
    else:
        result["success_before"] = _weighted(buckets, 0.0, SUCCESS_WINDOW)
    result["success_after"] = _weighted(buckets, end - SUCCESS_WINDOW, end)
    if expects.get("kinds"):
        if trigger_seconds is None:
            result["reacted"] = False
            result["error"] = f"the trigger {expects.get('after')!r} never switched (the run was too short?)"
        else:
            reaction = next(
                (d for d in decisions if d["kind"] in expects["kinds"] and d["seconds"] >= trigger_seconds),
                None,
            )
            if reaction is not None:
                result["reaction_seconds"] = round(reaction["seconds"] - trigger_seconds, 1)
                result["reacted"] = result["reaction_seconds"] <= expects["within_seconds"]
                for kind in expects.get("then") or []:
                    later = next(
                        (d for d in decisions if d["kind"] == kind and d["seconds"] >= reaction["seconds"]),
                        None,
                    )
                    result["then"][kind] = (
                        None if later is None else round(later["seconds"] - trigger_seconds, 1)
                    )
            else:
                result["reacted"] = False
    if expects.get("recovers"):
        before, after = result["success_before"], result["success_after"]
        result["recovered"] = before is not None and after is not None and after >= before - 0.05
    result["passed"] = (
        result["false_alarms"] == 0
        and (not expects.get("kinds") or bool(result["reacted"]))
        and all(value is not None for value in result["then"].values())
        and len(result["then"]) == len(expects.get("then") or [])
        and (not expects.get("recovers") or bool(result["recovered"]))
    )
    return result


# Start, warm-up (the first scenario only: the base is cached) and shutdown on a busy 2-core machine.
DEMO_OVERHEAD_SECONDS = 1800


def run_scenario(
    name: str, *, seed: int, at: float | None, budget: float | None, port: int, scratch: Path
) -> dict:
    """One `python -m demo` under DEMO_SCENARIO=name in scratch/<name> (the warm-up's base is cached in
    scratch/demo-cache, so only the first scenario pays for it); its summary, or an `error`."""
    scenario = scenario_named(name, at=at)
    loop_seconds = budget if budget is not None else scenario.duration_seconds
    summary_path = scratch / f"{name}-summary.json"
    summary_path.unlink(missing_ok=True)
    environment = {
        **os.environ,
        "DEMO_VAR_DIR": str(scratch / name),
        "DEMO_EXIT": "1",
        "DEMO_SEED": str(seed),
        "DEMO_BUDGET_SECONDS": str(loop_seconds),
        "DEMO_SUMMARY": str(summary_path),
        "DEMO_SCENARIO": name,
        "PORT": str(port),
        "AREAL_INFERENCE_PORT": str(port + 1),
    }
    if at is not None:
        environment["DEMO_SCENARIO_AT"] = str(at)
    environment.pop("AREAL_VAR_DIR", None)
    started = time.monotonic()
    returncode, output = run_demo(environment, timeout=loop_seconds + DEMO_OVERHEAD_SECONDS)
    if returncode != 0 or not summary_path.exists():
        return {
            "scenario": {"name": name},
            "error": f"the demo failed (exit {returncode})\n" + output[-3000:],
            "wall_seconds": round(time.monotonic() - started),
        }
    return json.loads(summary_path.read_text())


def _percent(value) -> str:
    return "-" if value is None else f"{value:.0%}"


def report(result: dict) -> str:
    expected = "/".join(result["expected"]) or "no decision"
    if result["expected"]:
        reaction = (
            f"{result['reaction_seconds']:.0f}s" if result["reaction_seconds"] is not None else "never"
        ) + f" (limit {result['within_seconds']:.0f}s)"
    else:
        reaction = "-"
    then = "  ".join(
        f"then {kind} {'never' if seconds is None else f'at +{seconds:.0f}s'}"
        for kind, seconds in result["then"].items()
    )
    recovered = "" if result["recovered"] is None else f"  recovered {'yes' if result['recovered'] else 'no'}"
    return (
        f"{result['scenario']:<13} expects {expected:<24} reaction {reaction:<20} {then}  "
        f"false alarms {result['false_alarms']}  success {_percent(result['success_before'])} → "
        f"{_percent(result['success_after'])}{recovered}  {'PASSED' if result['passed'] else 'FAILED'}"
        + (f"\n  {result['error']}" if result.get("error") else "")
        + f"\n  decisions: {' '.join(result['decisions']) or 'none'}"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scenarios", nargs="+", default=["tool_failure", "drift", "bad_release", "stationary"]
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--at", type=float, default=None, help="seconds after the traffic starts (the trigger)"
    )
    parser.add_argument(
        "--budget", type=float, default=None, help="the loop's seconds (default: the scenario's)"
    )
    parser.add_argument("--settle", type=float, default=SETTLE_SECONDS)
    parser.add_argument("--port", type=int, default=8770)
    parser.add_argument(
        "--scratch", type=Path, default=None, help="kept afterwards (default: a temporary one)"
    )
    parser.add_argument("--summary", type=Path, action="append", default=[], help="analyse a summary only")
    arguments = parser.parse_args(argv)
    for name in arguments.scenarios:
        scenario_named(name)  # an unknown name fails before anything runs
    summaries = [json.loads(path.read_text()) for path in arguments.summary]
    if not summaries:
        with tempfile.TemporaryDirectory(prefix="evolution-bench-") as temporary:
            scratch = arguments.scratch or Path(temporary)
            scratch.mkdir(parents=True, exist_ok=True)
            for name in arguments.scenarios:
                load = os.getloadavg()[0]
                summary = run_scenario(
                    name,
                    seed=arguments.seed,
                    at=arguments.at,
                    budget=arguments.budget,
                    port=arguments.port,
                    scratch=scratch,
                )
                summary["load"] = [round(load, 2), round(os.getloadavg()[0], 2)]
                summaries.append(summary)
    results, status = [], 0
    for summary in summaries:
        if "error" in summary:
            print(f"{summary['scenario']['name']}: {summary['error']}")
            results.append(
                {"scenario": summary["scenario"]["name"], "error": summary["error"], "passed": False}
            )
            status = max(status, 1)
            continue
        try:
            result = analyse(summary, settle_seconds=arguments.settle)
        except NoControlPlane as problem:
            print(f"{summary.get('scenario', {}).get('name', '?')}: NO FIGURES: {problem}")
            results.append({"scenario": summary.get("scenario", {}).get("name"), "error": str(problem)})
            status = 2
            continue
        result["load"] = summary.get("load")
        results.append(result)
        print(report(result))
        status = max(status, 0 if result["passed"] else 1)
    print(json.dumps(results, indent=1))
    return status


if __name__ == "__main__":
    raise SystemExit(main())
