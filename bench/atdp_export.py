"""Benchmark of the ATDP v1 export path: N synthetic trajectories (default 100000; 4 llm_call steps
each, ~200 token ids a step) generated lazily and streamed through write_jsonl and write_parquet into
temporary files, plus validation and generation alone for reference.

Each stage runs in its own child process so its peak RSS (getrusage ru_maxrss) is its own; the goal is
under 200 MB at N = 10^5, i.e. memory independent of N.

    .venv/bin/python -m bench.atdp_export [--count N] [--stages generate,validate,jsonl,parquet]
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from workers.atdp import read_jsonl, validate_trajectory, write_jsonl

REPOSITORY = Path(__file__).resolve().parents[1]
STAGES = ("generate", "validate", "jsonl", "parquet")
STEPS = 4
VOCABULARY = 151_936


def synthetic_trajectories(count: int, *, seed: int = 0) -> Iterator[dict]:
    """Valid ATDP v1 trajectories, made one at a time. Each llm_call's prompt extends the previous
    call's prompt and completion (as a real multi-turn agent's does)."""
    generator = np.random.default_rng(seed)
    namespace = uuid.UUID(int=seed)
    for number in range(count):
        steps = []
        history: list[int] = []
        for index in range(STEPS):
            new_context = generator.integers(0, VOCABULARY, size=int(generator.integers(20, 40))).tolist()
            completion = generator.integers(0, VOCABULARY, size=int(generator.integers(25, 45))).tolist()
            prompt = history + new_context if index else generator.integers(0, VOCABULARY, size=80).tolist()
            logprobs = (-generator.exponential(0.5, size=len(completion))).astype(np.float32).tolist()
            step_id = str(uuid.uuid5(namespace, f"{number}:{index}"))
            steps.append(
                {
                    "step_id": step_id,
                    "index": index,
                    "parent_step_id": steps[-1]["step_id"] if steps else None,
                    "kind": "llm_call",
                    "observation": {
                        "messages": [{"role": "user", "content": f"turn {index} of task {number}"}],
                        "params": {"temperature": 1.0},
                    },
                    "state": {},
                    "action": {"text": f"answer {index}"},
                    "result": {"finish_reason": "stop"},
                    "tokens": {
                        "tokenizer": "bench-tokenizer",
                        "prompt_ids": prompt,
                        "completion_ids": completion,
                        "completion_logprobs": logprobs,
                        "completion_versions": [3] * len(completion),
                        "loss_mask": None,
                    },
                    "versions": {
                        "model_version": "bench-3",
                        "policy_version": 3,
                        "tools": {},
                        "prompt_version": None,
                        "gateway": "bench",
                    },
                    "cost": {
                        "prompt_tokens": len(prompt),
                        "completion_tokens": len(completion),
                        "latency_ms": 100,
                        "ttft_ms": 10,
                        "usd": 0.0001,
                    },
                    "permissions": {"scopes": ["gateway:call"], "data_class": "internal"},
                    "pii": {"redacted": False, "entities": []},
                    "replayable": "approximate",
                    "created_at": "2025-03-04T10:15:00Z",
                }
            )
            history = prompt + completion
        yield {
            "atdp_version": "1.0",
            "trajectory_id": str(uuid.uuid5(namespace, str(number))),
            "session_id": f"bench-{number}",
            "tenant": "bench",
            "agent": {"name": "bench", "version": "1"},
            "task_id": f"task-{number // 8}",
            "group_id": f"group-{number // 8}",
            "status": "complete",
            "purpose": "production",
            "started_at": "2025-03-04T10:15:00Z",
            "ended_at": "2025-03-04T10:16:00Z",
            "steps": steps,
            "rewards": [
                {
                    "reward_id": str(uuid.uuid5(namespace, f"{number}:reward")),
                    "target": "trajectory",
                    "step_id": None,
                    "value": float(number % 2),
                    "kind": "boolean",
                    "label": None,
                    "source": "evaluator",
                    "timing": "terminal",
                    "created_by": "bench",
                    "created_at": "2025-03-04T10:16:00Z",
                    "idempotency_key": None,
                }
            ],
            "governance": {
                "consent": "full",
                "data_class": "internal",
                "retention_until": None,
                "review": {"status": "unreviewed", "reviewer": None, "at": None, "note": None},
                "qualification": {"status": "pending", "reasons": [], "at": None},
                "training_use": True,
            },
            "cost": {
                "prompt_tokens": sum(step["cost"]["prompt_tokens"] for step in steps),
                "completion_tokens": sum(step["cost"]["completion_tokens"] for step in steps),
                "latency_ms": 400,
                "ttft_ms": None,
                "usd": 0.0004,
            },
        }


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


def run_stage(stage: str, count: int, directory: str) -> dict:
    if stage == "parquet":
        from workers.atdp import write_parquet  # pyarrow is imported only in this stage
    baseline = peak_rss_mb()
    started = time.perf_counter()
    records = synthetic_trajectories(count)
    size = None
    if stage == "generate":
        written = sum(1 for _ in records)
    elif stage == "validate":
        written = 0
        for index, record in enumerate(records):
            if validate_trajectory(record):
                raise SystemExit(f"synthetic record {index} is invalid: {validate_trajectory(record)[:3]}")
            written = index + 1
    elif stage == "jsonl":
        path = os.path.join(directory, "export.jsonl")
        with open(path, "wb") as out:
            written = write_jsonl(records, out)
        size = os.path.getsize(path)
    else:
        path = os.path.join(directory, "export.parquet")
        written = write_parquet(records, path)
        size = os.path.getsize(path)
    return {
        "stage": stage,
        "records": written,
        "seconds": round(time.perf_counter() - started, 2),
        "baseline_rss_mb": round(baseline, 1),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "file_mb": None if size is None else round(size / 2**20, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--stages", default=",".join(STAGES))
    parser.add_argument("--stage", help=argparse.SUPPRESS)  # internal: run one stage in this process
    parser.add_argument("--directory", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.stage:
        print(json.dumps(run_stage(arguments.stage, arguments.count, arguments.directory)))
        return

    first = next(synthetic_trajectories(1))
    assert validate_trajectory(first) == [], validate_trajectory(first)
    buffer = [json.dumps(first).encode()]
    assert next(read_jsonl(buffer)).record == first

    print(
        f"ATDP export benchmark: {arguments.count} trajectories x {STEPS} steps "
        f"(~{sum(len(s['tokens']['prompt_ids']) + len(s['tokens']['completion_ids']) for s in first['steps']) // STEPS}"
        f" token ids a step), python {sys.version.split()[0]}"
    )
    print("seconds include generating the records; 'net' subtracts the generate stage's time")
    print(
        f"{'stage':<10}{'seconds':>9}{'net s':>8}{'net rec/s':>11}{'baseline MB':>13}{'peak RSS MB':>13}"
        f"{'file MB':>9}"
    )
    generate_seconds = 0.0
    with tempfile.TemporaryDirectory() as directory:
        for stage in arguments.stages.split(","):
            completed = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "bench.atdp_export",
                    "--stage",
                    stage,
                    "--count",
                    str(arguments.count),
                    "--directory",
                    directory,
                ],
                check=True,
                capture_output=True,
                text=True,
                cwd=REPOSITORY,
            )
            result = json.loads(completed.stdout.strip().splitlines()[-1])
            if stage == "generate":
                generate_seconds = result["seconds"]
                net = result["seconds"]
            else:
                net = max(result["seconds"] - generate_seconds, 1e-9)
            file_mb = "" if result["file_mb"] is None else result["file_mb"]
            print(
                f"{stage:<10}{result['seconds']:>9}{net:>8.1f}{result['records'] / net:>11.0f}"
                f"{result['baseline_rss_mb']:>13}{result['peak_rss_mb']:>13}{file_mb:>9}"
            )


if __name__ == "__main__":
    main()
