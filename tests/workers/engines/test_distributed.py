"""The torchrun + FSDP2 path, checked on CPU with gloo (no GPU on this machine): two ranks, each a whole
GRPO group of the batch, give the single-process update over the whole batch."""

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from tests.workers.engines.test_trainer import fixed_set
from workers.engines import TrainConfig, Trainer

ROOT = Path(__file__).resolve().parents[3]


def test_two_cpu_ranks_match_one_process(model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    samples = fixed_set(count=6)
    with open(tmp_path / "samples.jsonl", "w") as handle:
        for sample in samples:
            handle.write(json.dumps(asdict(sample)) + "\n")
    # adam_eps 1: the first update is lr * g / (|g| + 1), about lr * g, so a wrong gradient scale would show
    # (with a small eps Adam's first step is lr * sign(g) whatever the scale)
    config = TrainConfig(algorithm="sft", learning_rate=1.0, adam_eps=1.0, max_grad_norm=None)
    (tmp_path / "config.json").write_text(json.dumps(config.to_dict()))
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "-m",
        "workers.engines.distributed",
        "--model",
        str(model_dir),
        "--samples",
        str(tmp_path / "samples.jsonl"),
        "--config",
        str(tmp_path / "config.json"),
        "--steps",
        "1",
        "--batch-size",
        "6",
        "--out",
        str(tmp_path / "out"),
        "--device",
        "cpu",
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]

    single = Trainer(model_dir, config)
    single.step(samples)
    sharded = AutoModelForCausalLM.from_pretrained(tmp_path / "out" / "export", dtype=torch.float32)
    expected = single.model.state_dict()
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).state_dict()
    for key, value in sharded.state_dict().items():
        assert torch.allclose(value, expected[key], atol=1e-7), key
    moved = max(float((expected[key] - base[key]).abs().max()) for key in base)
    assert moved > 1e-4  # the comparison is not between two untouched models
    metrics = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 1
    assert metrics[0]["samples"] == 3


def test_a_sharded_model_trains_padded_never_with_the_prefix_layout(model_dir):
    # Under FSDP2 on an H100 the prefix layout's two forwards before one backward read freed weights
    # (illegal memory access); a wrapped model takes the padded layout, and an explicit prefix is refused.
    def unchanged(model):
        return model

    wrapped = Trainer(model_dir, TrainConfig(algorithm="sft"), device="cpu", model_wrapper=unchanged)
    assert Trainer(model_dir, TrainConfig(algorithm="sft"), device="cpu").layout == "prefix"
    assert wrapped.layout == "padded"
    with pytest.raises(ValueError, match="layout 'prefix' cannot run on a sharded"):
        Trainer(
            model_dir, TrainConfig(algorithm="sft", layout="prefix"), device="cpu", model_wrapper=unchanged
        )
