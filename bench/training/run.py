"""Trainer throughput: our Trainer vs TRL's GRPOTrainer, same model, prompts, sizes, CPU, one run.

    scripts/trl_venv.sh && .venv/bin/python bench/training/run.py [--rounds 5 --steps 6]
    .venv/bin/python bench/training/run.py --model smollm2 --mode both --rounds 2 --steps 3

Both trainers run GRPO on the same model: `toy` (modelgen's default model, seed 0, ~4 M parameters; 2
prompts x 8 generations by default) or `smollm2` (SmolLM2-135M-Instruct, prepared once by
bench/training/real_model.py; 2 prompts x 4 generations by default), exactly 32 completion tokens
(end-of-sequence suppressed on both sides), one optimizer update per batch, lr 1e-5, AdamW, clipping at
1.0, float32, the same torch threads, no KL reference, gradient checkpointing off on both (TRL's default is
on; the figure with it on is one of the variants). `--mode full` trains every weight, `--mode lora` a LoRA
adapter (the same rank, alpha and target modules on both sides: common.LORA_*), `both` runs each.
Our trainer runs its default layout, which on CPU forwards each group's shared prompt once ("prefix").
Each round starts one fresh process per trainer and mode, alternating which goes first; each process runs 1
warm-up step and `--steps` timed steps. The training phase is the step minus generation and scoring (ours:
Trainer.step; TRL: the step minus _generate_and_score_completions).
Reported: medians over all timed steps of generated (loss) tokens per second of training, end-to-end
samples/s, each process's peak RSS, the ratios ours / TRL (per round and overall), and the load average
before and after each process (the machine is shared).
"""

import argparse
import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[2]))
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OURS_PYTHON = ROOT / ".venv" / "bin" / "python"
TRL_PYTHON = ROOT / ".venv-trl" / "bin" / "python"
MODELS = {"toy": {"group_size": 8}, "smollm2": {"group_size": 4}}
# one-process variants after the rounds: (name, which trainer, extra arguments)
VARIANTS = (
    ("trl_gradient_checkpointing", "trl", ("--gradient-checkpointing",)),
    ("ours_gradient_checkpointing", "ours", ("--gradient-checkpointing",)),
    ("ours_padded", "ours", ("--layout", "padded")),
)


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0]) if Path("/proc/loadavg").exists() else -1.0


def measure(trainer, model, arguments, extra=(), env=None):
    python, script = (
        (arguments.ours_python, "ours.py") if trainer == "ours" else (arguments.trl_python, "trl_peer.py")
    )
    before = load_average()
    done = subprocess.run(
        [
            python,
            str(ROOT / "bench" / "training" / script),
            "--model",
            str(model),
            "--steps",
            str(arguments.steps),
            "--warmup",
            "1",
            "--threads",
            str(arguments.threads),
            "--group-size",
            str(arguments.group_size),
            "--completion-tokens",
            str(arguments.completion_tokens),
            "--device",
            arguments.device,
            *extra,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=3600,
        env=env,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{script} failed:\n{done.stderr[-3000:]}")
    run = json.loads(done.stdout.strip().splitlines()[-1])
    run["load_average"] = [before, load_average()]
    return run


def summarize(runs):
    train = [t / s for run in runs for t, s in zip(run["loss_tokens"], run["train_seconds"], strict=True)]
    step = [
        n / (g + s)
        for run in runs
        for n, g, s in zip(
            run.get("samples") or [16] * len(run["train_seconds"]),
            run["generation_seconds"],
            run["train_seconds"],
            strict=True,
        )
    ]
    cpu = [
        t / s
        for run in runs
        for t, s in zip(run["loss_tokens"], run.get("train_cpu_seconds", []), strict=False)
    ]
    return {
        "train_tokens_per_s": statistics.median(train),
        "train_tokens_per_cpu_s": statistics.median(cpu) if cpu else None,
        "samples_per_s": statistics.median(step),
        "train_seconds": statistics.median([s for run in runs for s in run["train_seconds"]]),
        "generation_seconds": statistics.median([g for run in runs for g in run["generation_seconds"]]),
        "peak_rss_mb": max(run["peak_rss_mb"] for run in runs),
        "peak_gpu_mb": max((run.get("peak_gpu_mb") or 0.0) for run in runs) or None,
        "steps": len(train),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=sorted(MODELS), default="toy")
    parser.add_argument(
        "--model-dir",
        type=Path,
        default=None,
        help="smollm2: where it is prepared; a directory that already holds a config.json is used as it is",
    )
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where both trainers run")
    parser.add_argument("--ours-python", default=str(OURS_PYTHON), help="the interpreter of ours.py")
    parser.add_argument("--trl-python", default=str(TRL_PYTHON), help="the interpreter of trl_peer.py")
    parser.add_argument("--mode", choices=("full", "lora", "both"), default="full")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=None, help="generations per prompt (model default)")
    parser.add_argument("--completion-tokens", type=int, default=32)
    parser.add_argument(
        "--omp-passive",
        action="store_true",
        help="OMP_WAIT_POLICY=PASSIVE for both trainers: on a machine whose cores are taken by others, "
        "spinning OpenMP threads wait for each other's time slices (a step 10-20x slower)",
    )
    parser.add_argument(
        "--no-variants",
        action="store_true",
        help="skip the one-process variants (gradient checkpointing on either side, ours padded)",
    )
    parser.add_argument("--out", type=Path, default=None, help="raw results (default bench/results/...)")
    arguments = parser.parse_args()
    if arguments.group_size is None:
        arguments.group_size = MODELS[arguments.model]["group_size"]
    if not shutil.which(arguments.trl_python):
        sys.exit(f"{arguments.trl_python} is missing: run scripts/trl_venv.sh first")
    env = dict(os.environ)
    if arguments.omp_passive:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    modes = ["full", "lora"] if arguments.mode == "both" else [arguments.mode]
    results: dict[str, dict[str, list]] = {mode: {} for mode in modes}
    per_round: dict[str, list] = {mode: [] for mode in modes}
    per_round_cpu: dict[str, list] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as folder:
        if arguments.model == "toy":
            from workers.inference.modelgen import create_default_model

            model = create_default_model(Path(folder) / "model", seed=0)
        elif arguments.model_dir and (arguments.model_dir / "config.json").exists():
            model = arguments.model_dir
        else:
            from bench.training.real_model import DEFAULT_OUT, prepare

            model = prepare(arguments.model_dir or DEFAULT_OUT)
        started = time.time()
        print(f"load average at start: {Path('/proc/loadavg').read_text().strip()}", flush=True)
        for round_index in range(arguments.rounds):
            order = ["ours", "trl"] if round_index % 2 == 0 else ["trl", "ours"]
            for mode in modes:
                extra = ("--lora",) if mode == "lora" else ()
                this_round = {}
                for name in order:
                    run = measure(name, model, arguments, extra, env)
                    results[mode].setdefault(name, []).append(run)
                    this_round[name] = summarize([run])
                ratio = this_round["ours"]["train_tokens_per_s"] / this_round["trl"]["train_tokens_per_s"]
                cpu_ratio = (
                    this_round["ours"]["train_tokens_per_cpu_s"] / this_round["trl"]["train_tokens_per_cpu_s"]
                )
                per_round[mode].append(ratio)
                per_round_cpu[mode].append(cpu_ratio)
                print(
                    f"round {round_index + 1}/{arguments.rounds} {mode}: "
                    f"ours {this_round['ours']['train_tokens_per_s']:.0f} vs "
                    f"TRL {this_round['trl']['train_tokens_per_s']:.0f} training tokens/s = {ratio:.2f}x "
                    f"(per CPU second {cpu_ratio:.2f}x); "
                    f"peak RSS {this_round['ours']['peak_rss_mb']:.0f} vs {this_round['trl']['peak_rss_mb']:.0f} MB "
                    f"(order {'/'.join(order)}, {time.time() - started:.0f} s, load {load_average():.2f})",
                    flush=True,
                )
        if not arguments.no_variants:
            for mode in modes:
                extra = ("--lora",) if mode == "lora" else ()
                for name, trainer, variant in VARIANTS:
                    results[mode].setdefault(name, []).append(
                        measure(trainer, model, arguments, (*extra, *variant), env)
                    )
        print(f"load average at end: {Path('/proc/loadavg').read_text().strip()}", flush=True)
    summary: dict = {
        "model": arguments.model,
        "group_size": arguments.group_size,
        "prompts": 2,
        "completion_tokens": arguments.completion_tokens,
        "threads": arguments.threads,
        "device": arguments.device,
        "omp_wait_policy": env.get("OMP_WAIT_POLICY", "default"),
    }
    for mode in modes:
        part = {name: summarize(runs) for name, runs in results[mode].items() if runs}
        part["ratio_train_tokens_per_s"] = (
            part["ours"]["train_tokens_per_s"] / part["trl"]["train_tokens_per_s"]
        )
        part["ratio_train_tokens_per_s_per_round"] = per_round[mode]
        part["ratio_train_tokens_per_cpu_s_per_round"] = per_round_cpu[mode]
        if part["ours"]["train_tokens_per_cpu_s"] and part["trl"]["train_tokens_per_cpu_s"]:
            part["ratio_train_tokens_per_cpu_s"] = (
                part["ours"]["train_tokens_per_cpu_s"] / part["trl"]["train_tokens_per_cpu_s"]
            )
        part["ratio_samples_per_s"] = part["ours"]["samples_per_s"] / part["trl"]["samples_per_s"]
        part["ratio_peak_rss"] = part["ours"]["peak_rss_mb"] / part["trl"]["peak_rss_mb"]
        summary[mode] = part
    out = arguments.out
    if out is None:
        name = "training.json" if arguments.model == "toy" else f"training-{arguments.model}.json"
        out = ROOT / "bench" / "results" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"summary": summary, "runs": results}, indent=2))
    print(json.dumps(summary, indent=2))
    print(f"raw results: {out}")


if __name__ == "__main__":
    main()
