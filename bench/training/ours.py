"""One measurement of our trainer: generation with the trainer's weights, then Trainer.step (GRPO), per step.

.venv/bin/python bench/training/ours.py --model DIR --steps 6 --warmup 1 [--group-size 8 --completion-tokens 32 --lora]
"""

import argparse
import functools
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from bench.training.common import (  # noqa: E402
    COMPLETION_TOKENS,
    GROUP_SIZE,
    LEARNING_RATE,
    LORA_ALPHA,
    LORA_DROPOUT,
    LORA_RANK,
    LORA_TARGETS,
    PROMPTS,
    low_half_fraction,
    vocab_half,
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=GROUP_SIZE)
    parser.add_argument("--completion-tokens", type=int, default=COMPLETION_TOKENS)
    parser.add_argument("--lora", action="store_true", help="train a LoRA adapter (common.LORA_*) only")
    parser.add_argument("--layout", default="auto", help="TrainConfig.layout (auto: shared prefixes on CPU)")
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    arguments = parser.parse_args()
    torch.set_num_threads(arguments.threads)
    from transformers import AutoTokenizer
    from transformers.utils import logging as transformers_logging

    from workers.engines import LoraSettings, TrainConfig, Trainer
    from workers.engines.rollout import sample_groups

    transformers_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(arguments.model)
    prompts = [tokenizer(prompt).input_ids for prompt in PROMPTS]
    reward = functools.partial(low_half_fraction, half=vocab_half(arguments.model))
    lora = (
        LoraSettings(rank=LORA_RANK, alpha=LORA_ALPHA, dropout=LORA_DROPOUT, target_modules=LORA_TARGETS)
        if arguments.lora
        else None
    )
    trainer = Trainer(
        arguments.model,
        TrainConfig(
            algorithm="grpo",
            learning_rate=LEARNING_RATE,
            max_grad_norm=1.0,
            layout=arguments.layout,
            lora=lora,
            gradient_checkpointing=arguments.gradient_checkpointing,
        ),
        device=arguments.device,
    )
    out = {
        "train_seconds": [],
        "train_cpu_seconds": [],  # the process's CPU time (all threads) in the training phase
        "generation_seconds": [],
        "loss_tokens": [],
        "tokens": [],
        "samples": [],
        "reward_mean": [],
        "layout": trainer.layout,
        "trainable_parameters": sum(p.numel() for p in trainer.parameters),
    }
    for step in range(arguments.warmup + arguments.steps):
        started = time.perf_counter()
        samples = sample_groups(
            trainer.model,
            prompts,
            group_size=arguments.group_size,
            max_new_tokens=arguments.completion_tokens,
            reward=reward,
            seed=step,
        )
        generated = time.perf_counter()
        cpu_started = time.process_time()
        metrics = trainer.step(samples)
        cpu_seconds = time.process_time() - cpu_started
        trained = time.perf_counter()
        if step >= arguments.warmup:
            out["generation_seconds"].append(generated - started)
            out["train_seconds"].append(trained - generated)
            out["train_cpu_seconds"].append(cpu_seconds)
            out["loss_tokens"].append(metrics.loss_tokens)
            out["tokens"].append(metrics.tokens)
            out["samples"].append(metrics.samples)
            out["reward_mean"].append(metrics.reward_mean)
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if arguments.device == "cuda":
        out["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20
    print(json.dumps(out))


if __name__ == "__main__":
    main()
