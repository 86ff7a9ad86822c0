"""The multi-GPU entry point (workers.engines.distributed) under torchrun, timed: SFT on the weather desk's
legacy episodes rendered with the model's tokenizer and chat template, FSDP2 over every GPU of the machine
(NCCL), then the exported Hugging Face directory loaded back and compared with the trained loss.

    python3 bench/gpu/distributed.py --model DIR --steps 20 --batch-size 32 [--nproc 1] [--device cuda]

Prints the loss of the first and last steps, the median training tokens/s over the steps after the first
(its compile and allocator warm-up are left out), the wall time of the torchrun call, and whether the
export loads. `--device cpu --nproc 2` checks the same wiring on a machine without GPUs (gloo).
"""

import argparse
import dataclasses
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def write_samples(model_dir: Path, path: Path, count: int, seed: int = 0) -> int:
    from transformers import AutoTokenizer

    from workers.envs import weather
    from workers.envs.warmup import sft_sample

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rng = random.Random(seed)
    tokens = 0
    with open(path, "w") as handle:
        for index, task in enumerate(weather.make_tasks(split="train", count=count, seed=seed)):
            sample = sft_sample(tokenizer, weather.legacy_episode(task, rng), f"episode-{index}")
            tokens += len(sample.input_ids)
            handle.write(json.dumps(dataclasses.asdict(sample)) + "\n")
    return tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--nproc", type=int, default=1, help="processes (one per GPU)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--layout", default="auto", help="the trainer's TrainConfig.layout")
    parser.add_argument("--out", type=Path, default=None, help="also write the summary here (JSON)")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        samples = work / "samples.jsonl"
        tokens = write_samples(arguments.model, samples, count=arguments.steps * arguments.batch_size)
        (work / "config.json").write_text(
            json.dumps(
                {
                    "algorithm": "sft",
                    "learning_rate": arguments.learning_rate,
                    "schedule": "constant",
                    "total_steps": arguments.steps,
                    "layout": arguments.layout,
                }
            )
        )
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc-per-node={arguments.nproc}",
            "-m",
            "workers.engines.distributed",
            "--model",
            str(arguments.model),
            "--samples",
            str(samples),
            "--config",
            str(work / "config.json"),
            "--steps",
            str(arguments.steps),
            "--batch-size",
            str(arguments.batch_size),
            "--out",
            str(work / "run"),
            "--device",
            arguments.device,
        ]
        started = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1800)
        wall = time.perf_counter() - started
        if done.returncode != 0:
            sys.exit(f"torchrun failed ({done.returncode}):\n{done.stderr[-4000:]}")
        steps = [json.loads(line) for line in (work / "run" / "metrics.jsonl").read_text().splitlines()]
        from transformers import AutoModelForCausalLM

        exported = AutoModelForCausalLM.from_pretrained(work / "run" / "export")
        summary = {
            "device": arguments.device,
            "nproc": arguments.nproc,
            "steps": len(steps),
            "batch_size": arguments.batch_size,
            "sample_tokens": tokens,
            "loss_first": steps[0]["loss"],
            "loss_last": steps[-1]["loss"],
            "tokens_per_s_median": statistics.median(step["tokens_per_second"] for step in steps[1:]),
            "step_seconds_median": statistics.median(step["seconds"] for step in steps[1:]),
            "torchrun_wall_seconds": round(wall, 1),
            "export_parameters": sum(p.numel() for p in exported.parameters()),
        }
    print(json.dumps(summary, indent=2))
    if arguments.out:
        arguments.out.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
