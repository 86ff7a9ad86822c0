"""One measurement of our trainer: generation with the trainer's weights, then Trainer.step (GRPO), per step.

.venv/bin/python bench/training/ours.py --model DIR --steps 6 --warmup 1
"""

import argparse
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from bench.training.common import COMPLETION_TOKENS, GROUP_SIZE, LEARNING_RATE, PROMPTS, low_half_fraction  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--layout", default="auto", help="TrainConfig.layout (auto: shared prefixes on CPU)")
    arguments = parser.parse_args()
    torch.set_num_threads(arguments.threads)
    from transformers import AutoTokenizer
    from transformers.utils import logging as transformers_logging

    from workers.engines import TrainConfig, Trainer
    from workers.engines.rollout import sample_groups

    transformers_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(arguments.model)
    prompts = [tokenizer(prompt).input_ids for prompt in PROMPTS]
    trainer = Trainer(
        arguments.model,
        TrainConfig(
            algorithm="grpo", learning_rate=LEARNING_RATE, max_grad_norm=1.0, layout=arguments.layout
        ),
    )
    out = {"train_seconds": [], "generation_seconds": [], "loss_tokens": [], "tokens": [], "reward_mean": []}
    for step in range(arguments.warmup + arguments.steps):
        started = time.perf_counter()
        samples = sample_groups(
            trainer.model,
            prompts,
            group_size=GROUP_SIZE,
            max_new_tokens=COMPLETION_TOKENS,
            reward=low_half_fraction,
            seed=step,
        )
        generated = time.perf_counter()
        metrics = trainer.step(samples)
        trained = time.perf_counter()
        if step >= arguments.warmup:
            out["generation_seconds"].append(generated - started)
            out["train_seconds"].append(trained - generated)
            out["loss_tokens"].append(metrics.loss_tokens)
            out["tokens"].append(metrics.tokens)
            out["reward_mean"].append(metrics.reward_mean)
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(out))


if __name__ == "__main__":
    main()
