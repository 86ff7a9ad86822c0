"""Does online RL earn its keep on BFCL? For each seed, at equal wall time:

(a) the loop as the demo runs it: `DEMO_TASK=bfcl python -m demo` (SmolLM2-135M-Instruct, the warm-up's SFT
    on demonstrations from the train split's ground truth, online RL from the agent's own traffic with BFCL's
    checker's rewards, the control plane's gate and canaries); its figure is the held-out accuracy of the
    version in production at the end (the last promoted, else the warmed-up base);
(b) SFT only: the loop's own warmed-up base trained further on the same demonstrations plus the train-split
    answers of the loop's traffic that the checker accepted (reward 1: rejection sampling), for the wall time
    the loop took, then measured on the same held-out cases by the same gate. Both arms share the warm-up
    (the same seed's base, cached in var/demo-cache as `make demo` caches it; --fresh-base trains it again),
    so the comparison is the loop's minutes against as many more minutes of SFT from the same start.

Prints the held-out accuracy per category of both, the ratio (a)/(b), and the loop's staleness figures (the
share of qualified trajectories it trained on, the lag histogram).

    .venv/bin/python bench/bfcl/run.py [--seeds 0 1 2] [--budget 900] [--heldout 10] [--fresh-base]

Raw summaries go to bench/results/bfcl-<time>.json. The machine's load is printed with the figures.
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

DEMO_OVERHEAD_SECONDS = 3600  # zero-shot, warm-up, the final gate, the shutdown, on a busy 2-core machine
# The loop's demo directory: beside var/demo, so that its warm-up cache is var/demo-cache, `make demo`'s own
# (keyed by the seed, the warm-up's settings and the initial weights). The demo resets it on every run.
DEMO_DIR = ROOT / "var" / "bench-bfcl"
BASE_DIR = DEMO_DIR / "runs" / "bfcl" / "base"  # the loop's warmed-up base (its version 0)


def run_loop(seed: int, *, budget: int, heldout: int, port: int, scratch: Path, fresh_base: bool) -> dict:
    summary_path = scratch / f"loop-{seed}.json"
    environment = {
        **os.environ,
        "DEMO_TASK": "bfcl",
        "DEMO_VAR_DIR": str(DEMO_DIR),
        "DEMO_EXIT": "1",
        "DEMO_FRESH_BASE": "1" if fresh_base else "",
        "DEMO_SEED": str(seed),
        "DEMO_BUDGET_SECONDS": str(budget),
        "DEMO_HELDOUT": str(heldout),
        "DEMO_SUMMARY": str(summary_path),
        "PORT": str(port),
        "AREAL_INFERENCE_PORT": str(port + 1),
    }
    environment.pop("AREAL_VAR_DIR", None)
    started = time.monotonic()
    returncode, output = run_demo(environment, timeout=budget + DEMO_OVERHEAD_SECONDS)
    if returncode != 0 or not summary_path.exists():
        return {"seed": seed, "error": output[-3000:], "wall_seconds": round(time.monotonic() - started)}
    return json.loads(summary_path.read_text())


def production_figures(loop: dict) -> tuple[str, dict]:
    """The column of the loop's per-category table for the version in production at its end."""
    table = loop.get("per_category") or {}
    labels = [label for label in table if label != "zero-shot"]
    label = labels[-1] if labels else "warmed-up v0"
    return label, table.get(label, {})


def sft_only(seed: int, loop: dict, *, heldout: int, scratch: Path) -> dict:
    """(b): the loop's warmed-up base trained further on the demonstrations (as the loop's warm-up chose them)
    plus the accepted traffic for the loop's wall time, measured by the loop's gate."""
    from apps.evaluation.bfcl import bfcl_gate_heldout
    from demo.config import BFCL_CATEGORIES, TASK_DEFAULTS
    from workers.envs.bfcl import load_cases, turn_messages
    from workers.envs.bfcl.local import demonstration, demonstrations, train_on_demonstrations

    defaults = TASK_DEFAULTS["bfcl"]
    count = int(loop.get("demonstrations") or defaults["DEMO_BFCL_DEMOS"])
    chosen = demonstrations(BFCL_CATEGORIES, count=count, seed=seed)
    conversations = [(case, demonstration(case)) for case in chosen.cases]
    by_id = {
        case.case_id: case for category in BFCL_CATEGORIES for case in load_cases(category, split="train")
    }
    accepted = 0
    for answer in loop.get("accepted_traffic") or []:
        case = by_id.get(answer["case_id"])
        if case is None:  # never a held-out case: the traffic sends only the train split
            continue
        reply = {"role": "assistant", "content": answer["content"] if not answer["calls"] else ""}
        if answer["calls"]:
            reply["tool_calls"] = [
                {
                    "id": f"call_{index}",
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
                for index, (name, arguments) in enumerate(answer["calls"])
            ]
        conversations.append((case, [*turn_messages(case, 0), reply]))
        accepted += 1
    seconds = float(loop.get("loop_seconds", 0))
    out = scratch / f"sft-only-{seed}"
    started = time.monotonic()
    steps = train_on_demonstrations(
        BASE_DIR,
        out,
        conversations,
        steps=1_000_000,
        batch_size=int(defaults["DEMO_SFT_BATCH"]),
        learning_rate=float(defaults["DEMO_SFT_LR"]),
        seed=seed,
        seconds=seconds,
        micro_batch_tokens=int(defaults["DEMO_MICRO_BATCH_TOKENS"]),
    )
    trained_seconds = time.monotonic() - started
    gate = {"environment": "bfcl", "categories": list(BFCL_CATEGORIES), "cases": heldout}
    measured = bfcl_gate_heldout(str(out), gate)
    return {
        "demonstrations": len(chosen.cases),
        "accepted_traffic": accepted,
        "steps": steps,
        "seconds": round(trained_seconds, 1),
        "budget_seconds": round(seconds, 1),
        "per_category": {
            **{name: figures["accuracy"] for name, figures in measured.per_category.items()},
            "all": measured.success,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=900, help="the loop's seconds (DEMO_BUDGET_SECONDS)")
    parser.add_argument("--heldout", type=int, default=10, help="held-out cases per category (DEMO_HELDOUT)")
    parser.add_argument("--port", type=int, default=8600)
    parser.add_argument(
        "--fresh-base", action="store_true", help="train each seed's warm-up again (DEMO_FRESH_BASE=1)"
    )
    arguments = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "areal_web.settings.local")
    import django

    django.setup()
    from demo.config import BFCL_CATEGORIES

    results = []
    for seed in arguments.seeds:
        load_before = os.getloadavg()[0]
        with tempfile.TemporaryDirectory(prefix=f"bfcl-bench-{seed}-") as scratch:
            loop = run_loop(
                seed,
                budget=arguments.budget,
                heldout=arguments.heldout,
                port=arguments.port,
                scratch=Path(scratch),
                fresh_base=arguments.fresh_base,
            )
            if "error" in loop:
                print(f"seed {seed}: the loop failed\n{loop['error']}", flush=True)
                results.append({"seed": seed, "loop": loop})
                continue
            baseline = sft_only(seed, loop, heldout=arguments.heldout, scratch=Path(scratch))
        label, figures = production_figures(loop)
        result = {
            "seed": seed,
            "load": [round(load_before, 1), round(os.getloadavg()[0], 1)],
            "loop": {
                "production": label,
                "per_category": figures,
                "zero_shot": (loop.get("per_category") or {}).get("zero-shot", {}),
                "warmed_up": (loop.get("per_category") or {}).get("warmed-up v0", {}),
                "warmup_seconds": loop.get("warmup_seconds"),
                "loop_seconds": loop.get("loop_seconds"),
                "trajectories": loop.get("trajectories"),
                "steps": loop.get("steps"),
                "staleness": loop.get("staleness"),
                "group_size": loop.get("group_size"),
            },
            "sft_only": baseline,
        }
        results.append(result)
        print(f"\nseed {seed} (load {result['load'][0]} → {result['load'][1]})", flush=True)
        print(f"{'category':<18}{'zero-shot':>11}{'warmed-up':>11}{'(a) loop':>11}{'(b) SFT':>11}{'a/b':>8}")
        for category in [*BFCL_CATEGORIES, "all"]:
            a, b = figures.get(category), baseline["per_category"].get(category)
            cells = [
                result["loop"]["zero_shot"].get(category),
                result["loop"]["warmed_up"].get(category),
                a,
                b,
            ]
            ratio = f"{a / b:.2f}" if a is not None and b else "-"
            print(
                f"{category:<18}"
                + "".join(f"{'-' if value is None else f'{value:.0%}':>11}" for value in cells)
                + f"{ratio:>8}"
            )
        staleness = loop.get("staleness") or {}
        share = staleness.get("trained_share")
        group = loop.get("group_size") or 1
        groups = "the category" if group == 1 else f"{group} answers of one case"
        print(
            f"(a): production {label}, {loop.get('trajectories')} trajectories (GRPO groups: {groups}), "
            f"{loop.get('steps')} steps, "
            f"trained on {staleness.get('trained')} of {staleness.get('trained', 0) + staleness.get('stale', 0)} "
            f"qualified ({'-' if share is None else f'{share:.0%}'}), "
            f"{staleness.get('uniform', 0)} in groups scored alike (untrained), "
            f"lags {staleness.get('lag_histogram')}; "
            f"warm-up {loop.get('warmup_seconds')} s + loop {loop.get('loop_seconds')} s"
        )
        print(
            f"(b): {baseline['demonstrations']} demonstrations + {baseline['accepted_traffic']} accepted answers, "
            f"{baseline['steps']} steps in {baseline['seconds']} s (budget {baseline['budget_seconds']} s)",
            flush=True,
        )
    out = ROOT / "bench" / "results" / f"bfcl-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"\nraw: {out}")


if __name__ == "__main__":
    main()
