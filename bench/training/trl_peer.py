"""One measurement of TRL's GRPOTrainer (run in .venv-trl), timed by phase: generation and scoring
(`_generate_and_score_completions`) vs the rest of the training step (loss forward, backward, optimizer).

    .venv-trl/bin/python bench/training/trl_peer.py --model DIR --steps 6 --warmup 1 [--group-size 8 --lora]

With `--lora` TRL trains a peft LoRA adapter (the same rank, alpha, dropout and target modules as ours).
"""

import argparse
import functools
import json
import resource
import sys
import tempfile
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


def reward_low_half(prompts, completions, completion_ids, *, half, **kwargs):
    return [low_half_fraction(ids, half) for ids in completion_ids]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu", help="cuda: bf16 autocast, as our trainer does"
    )
    parser.add_argument("--group-size", type=int, default=GROUP_SIZE)
    parser.add_argument("--completion-tokens", type=int, default=COMPLETION_TOKENS)
    parser.add_argument("--lora", action="store_true", help="train a peft LoRA adapter (common.LORA_*) only")
    arguments = parser.parse_args()
    torch.set_num_threads(arguments.threads)
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    total_steps = arguments.warmup + arguments.steps
    timings = {
        "step": [],
        "step_cpu": [],
        "generation": [],
        "generation_cpu": [],
        "loss_tokens": [],
        "tokens": [],
        "samples": [],
    }

    class Timed(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            started, cpu_started = time.perf_counter(), time.process_time()
            output = super()._generate_and_score_completions(inputs)
            timings["generation"].append(time.perf_counter() - started)
            timings["generation_cpu"].append(time.process_time() - cpu_started)
            timings["loss_tokens"].append(int(output["completion_mask"].sum()))
            timings["tokens"].append(int(output["completion_mask"].sum() + output["prompt_mask"].sum()))
            timings["samples"].append(int(output["completion_mask"].shape[0]))
            return output

    class StepClock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.started, self.cpu_started = time.perf_counter(), time.process_time()

        def on_step_end(self, args, state, control, **kwargs):
            if arguments.device == "cuda":
                torch.cuda.synchronize()  # the step's kernels are queued; the clock waits for them
            timings["step"].append(time.perf_counter() - self.started)
            timings["step_cpu"].append(time.process_time() - self.cpu_started)

    tokenizer = AutoTokenizer.from_pretrained(arguments.model)
    model = AutoModelForCausalLM.from_pretrained(arguments.model, dtype=torch.float32)
    dataset = Dataset.from_dict({"prompt": PROMPTS * (total_steps + 2)})
    with tempfile.TemporaryDirectory() as output_dir:
        config = GRPOConfig(
            output_dir=output_dir,
            use_cpu=arguments.device == "cpu",
            bf16=arguments.device == "cuda",
            use_vllm=False,
            report_to="none",
            per_device_train_batch_size=len(PROMPTS) * arguments.group_size,
            num_generations=arguments.group_size,
            gradient_accumulation_steps=1,
            max_completion_length=arguments.completion_tokens,
            learning_rate=LEARNING_RATE,
            max_grad_norm=1.0,
            lr_scheduler_type="constant",
            warmup_steps=0,
            max_steps=total_steps,
            logging_steps=1,
            save_strategy="no",
            temperature=1.0,
            top_p=1.0,
            beta=0.0,
            num_iterations=1,
            shuffle_dataset=False,
            gradient_checkpointing=arguments.gradient_checkpointing,
            seed=0,
            generation_kwargs={"min_new_tokens": arguments.completion_tokens},
            dataloader_num_workers=0,
        )
        peft_config = None
        if arguments.lora:
            from peft import LoraConfig

            peft_config = LoraConfig(
                r=LORA_RANK,
                lora_alpha=LORA_ALPHA,
                lora_dropout=LORA_DROPOUT,
                target_modules=list(LORA_TARGETS),
                task_type="CAUSAL_LM",
            )
        reward = functools.update_wrapper(
            functools.partial(reward_low_half, half=vocab_half(arguments.model)), reward_low_half
        )
        trainer = Timed(
            model=model,
            args=config,
            reward_funcs=[reward],
            peft_config=peft_config,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[StepClock()],
        )
        trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
        checkpointing = bool(getattr(trainer.model, "is_activation_checkpointing", False))
        trainer.train()
    warm = arguments.warmup
    steps = timings["step"][warm:]
    generation = timings["generation"][warm:]
    out = {
        "train_seconds": [s - g for s, g in zip(steps, generation, strict=True)],
        "train_cpu_seconds": [
            s - g for s, g in zip(timings["step_cpu"][warm:], timings["generation_cpu"][warm:], strict=True)
        ],
        "generation_seconds": generation,
        "loss_tokens": timings["loss_tokens"][warm:],
        "tokens": timings["tokens"][warm:],
        "samples": timings["samples"][warm:],
        "trainable_parameters": trainable,
        "gradient_checkpointing": checkpointing,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    if arguments.device == "cuda":
        out["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20
    print(json.dumps(out))


if __name__ == "__main__":
    main()
