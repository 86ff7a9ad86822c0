"""Multi-GPU (or multi-node) training: the same Trainer under `torchrun`, parameters sharded with FSDP2.

    torchrun --nproc-per-node 8 -m workers.engines.distributed \
        --model /models/Qwen2.5-0.5B-Instruct --samples batch.jsonl --config config.json \
        --steps 100 --batch-size 64 --out var/runs/job-42

- One process per GPU (`LOCAL_RANK` picks the device); NCCL on CUDA, gloo on CPU (the CPU path exists so
  the wiring can be checked on a machine without GPUs: `--nproc-per-node 2` with `--device cpu`).
- `fully_shard` (torch.distributed.fsdp, FSDP2) wraps every decoder layer, then the whole model, before the
  Trainer builds its optimizer, so AdamW state is sharded too. Weights and optimizer stay float32; the
  Trainer's bf16 autocast does the compute on CUDA.
- Each step's batch (workers.engines.data.plan_batches, the same on every rank) is dealt to ranks by whole
  GRPO groups, so group baselines stay exact. Loss denominators are summed across ranks (`reduce_sum`), and
  the loss is multiplied by the world size because FSDP averages gradients: the update equals the
  single-process update over the whole batch.
- Samples: JSON Lines of workers.rl.samples.TrainingSample fields (the Celery task writes them).
- At the end rank 0 gathers the full state dict (cpu offload) and writes a Hugging Face directory to
  `--out/export` (plus `metrics.jsonl` with one StepMetrics per step). Checkpoints under FSDP would use
  torch.distributed.checkpoint (sharded); this entry point does not write them yet, so a multi-GPU job
  restarts from its base on failure (the single-process path resumes).
- Layout: a sharded model trains `padded` (the Trainer refuses `prefix` there). On an H100 (2026-11-26,
  bench/gpu/README.md) one rank trained SmolLM2-135M's shape at about 15,400 tokens/s with `padded`;
  the `prefix` layout's two forwards before one backward ended in an illegal memory access.
"""

import argparse
import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from workers.engines.checkpoints import copy_tokenizer_files
from workers.engines.config import TrainConfig
from workers.engines.data import plan_batches
from workers.engines.trainer import Trainer
from workers.rl.samples import TrainingSample


def shard_model(model):
    """FSDP2: every decoder layer its own unit, then the root."""
    from torch.distributed.fsdp import fully_shard

    layers = getattr(getattr(model, "model", None), "layers", None)
    for layer in layers or []:
        fully_shard(layer)
    fully_shard(model)
    return model


def deal_by_group(indices, samples, rank: int, world: int) -> list[int]:
    groups: dict = {}
    for index in indices:
        groups.setdefault(samples[index].group_id or f"alone-{index}", []).append(index)
    mine = []
    for position, members in enumerate(groups.values()):
        if position % world == rank:
            mine += members
    return mine


def load_samples(path) -> list[TrainingSample]:
    samples = []
    with open(path) as handle:
        for line in handle:
            if line.strip():
                data = json.loads(line)
                fields: dict[str, Any] = {
                    key: tuple(value) if isinstance(value, list) else value for key, value in data.items()
                }
                samples.append(TrainingSample(**fields))
    return samples


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="FSDP training under torchrun")
    parser.add_argument("--model", required=True)
    parser.add_argument("--samples", required=True)
    parser.add_argument("--config", required=True, help="TrainConfig as JSON")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu"
    )
    arguments = parser.parse_args(argv)

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if arguments.device == "cuda":
        torch.cuda.set_device(local_rank)
        device = f"cuda:{local_rank}"
    else:
        device = "cpu"
    dist.init_process_group(backend="nccl" if arguments.device == "cuda" else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    def reduce_sum(value: int) -> int:
        total = torch.tensor([value], dtype=torch.long, device=device)
        dist.all_reduce(total)
        return int(total.item())

    config = TrainConfig.from_dict(json.loads(Path(arguments.config).read_text()))
    samples = load_samples(arguments.samples)
    trainer = Trainer(
        arguments.model,
        config,
        device=device,
        model_wrapper=shard_model,
        reduce_sum=reduce_sum,
        world_size=world,
    )
    out = Path(arguments.out)
    out.mkdir(parents=True, exist_ok=True)
    plan = plan_batches(
        [s.group_id for s in samples],
        batch_size=arguments.batch_size,
        total_steps=arguments.steps,
        seed=config.seed,
    )
    with open(out / "metrics.jsonl", "a") if rank == 0 else open(os.devnull, "w") as log:
        for batch in plan:
            mine = deal_by_group(batch, samples, rank, world)
            if not mine:  # every rank computes the same plan, so every rank stops here together
                raise ValueError(f"a batch has fewer groups than the {world} ranks; raise --batch-size")
            metrics = trainer.step([samples[i] for i in mine])
            log.write(json.dumps(metrics.to_dict()) + "\n")
            log.flush()

    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(
        trainer.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    if rank == 0:
        from transformers import AutoModelForCausalLM

        export = AutoModelForCausalLM.from_pretrained(arguments.model, dtype=torch.float32)
        export.load_state_dict(state)
        export.save_pretrained(out / "export", safe_serialization=True)
        copy_tokenizer_files(Path(arguments.model), out / "export")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
