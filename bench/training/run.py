"""Trainer throughput: our Trainer vs TRL's GRPOTrainer, same model, prompts, sizes, CPU, one run.

    scripts/trl_venv.sh && .venv/bin/python bench/training/run.py [--rounds 5 --steps 6]

Both trainers run GRPO on the default model (modelgen, seed 0): 2 prompts × 8 generations, exactly 32
completion tokens (end-of-sequence suppressed on both sides), one optimizer update per batch, lr 1e-5,
float32, 2 torch threads, no KL reference, gradient checkpointing off on both (TRL's default is on; the
figure with it on is printed too). Our trainer runs its default layout, which on CPU forwards each group's
shared prompt once ("prefix"); one process with the padded layout (every sequence whole) is measured too.
Each round starts one fresh process per trainer, alternating which goes first; each process runs 1 warm-up
step and `--steps` timed steps. The training phase is the step minus generation and scoring (ours:
Trainer.step; TRL: the step minus _generate_and_score_completions).
Reported: medians over all timed steps of generated (loss) tokens per second of training, end-to-end
samples/s, and each process's peak RSS.
"""

import argparse
import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[2]))
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRL_PYTHON = ROOT / ".venv-trl" / "bin" / "python"


def measure(python, script, model, steps, extra=()):
    done = subprocess.run(
        [
            str(python),
            str(ROOT / "bench" / "training" / script),
            "--model",
            str(model),
            "--steps",
            str(steps),
            "--warmup",
            "1",
            *extra,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{script} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def summarize(runs):
    train = [t / s for run in runs for t, s in zip(run["loss_tokens"], run["train_seconds"], strict=True)]
    step = [
        16 / (g + s)
        for run in runs
        for g, s in zip(run["generation_seconds"], run["train_seconds"], strict=True)
    ]
    return {
        "train_tokens_per_s": statistics.median(train),
        "samples_per_s": statistics.median(step),
        "train_seconds": statistics.median([s for run in runs for s in run["train_seconds"]]),
        "generation_seconds": statistics.median([g for run in runs for g in run["generation_seconds"]]),
        "peak_rss_mb": max(run["peak_rss_mb"] for run in runs),
        "steps": len(train),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument(
        "--no-variants",
        action="store_true",
        help="skip the one-process variants (TRL with gradient checkpointing, ours padded)",
    )
    arguments = parser.parse_args()
    if not TRL_PYTHON.exists():
        sys.exit("run scripts/trl_venv.sh first")
    from workers.inference.modelgen import create_default_model

    results = {"ours": [], "trl": [], "trl_gradient_checkpointing": [], "ours_padded": []}
    with tempfile.TemporaryDirectory() as folder:
        model = create_default_model(Path(folder) / "model", seed=0)
        started = time.time()
        for round_index in range(arguments.rounds):
            order = ["ours", "trl"] if round_index % 2 == 0 else ["trl", "ours"]
            for name in order:
                if name == "ours":
                    results["ours"].append(
                        measure(ROOT / ".venv" / "bin" / "python", "ours.py", model, arguments.steps)
                    )
                else:
                    results["trl"].append(measure(TRL_PYTHON, "trl_peer.py", model, arguments.steps))
            print(
                f"round {round_index + 1}/{arguments.rounds} done ({time.time() - started:.0f} s)", flush=True
            )
        if not arguments.no_variants:
            results["trl_gradient_checkpointing"].append(
                measure(TRL_PYTHON, "trl_peer.py", model, arguments.steps, ("--gradient-checkpointing",))
            )
            results["ours_padded"].append(
                measure(
                    ROOT / ".venv" / "bin" / "python",
                    "ours.py",
                    model,
                    arguments.steps,
                    ("--layout", "padded"),
                )
            )
    summary = {name: summarize(runs) for name, runs in results.items() if runs}
    summary["ratio_train_tokens_per_s"] = (
        summary["ours"]["train_tokens_per_s"] / summary["trl"]["train_tokens_per_s"]
    )
    summary["ratio_samples_per_s"] = summary["ours"]["samples_per_s"] / summary["trl"]["samples_per_s"]
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "training.json").write_text(json.dumps({"summary": summary, "runs": results}, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
