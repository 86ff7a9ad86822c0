"""The training engine: one policy update per `step()` over any transformers causal LM.

    trainer = Trainer(model_dir, TrainConfig(algorithm="decoupled_ppo", learning_rate=1e-5, ...))
    metrics = trainer.step(samples, current_version=7)   # TrainingSample list -> StepMetrics
    info = trainer.checkpoint(run_dir, data_position=n)   # weights + optimizer + schedule + RNG + position
    trainer = Trainer.resume(model_dir, info.path)        # the same run, continued bit for bit on CPU
    trainer.export(out_dir)                                # a servable Hugging Face directory

A step: GRPO advantages per token (workers.rl.advantages) unless SFT; the batch split into `minibatches`
(one optimizer update each); every minibatch cut into micro-batches of at most `micro_batch_tokens`
(packed rows, workers.rl.packing, or length-bucketed padded batches: workers.engines.forward, which also
computes the LM head on generated positions only), each micro-batch's loss divided by the minibatch's whole
loss-token count, so accumulating the rows' gradients gives the minibatch's mean; gradient clipping,
the scheduled learning rate, AdamW. A sample whose advantage is zero at every token (its GRPO group's
rewards all equal) is not forwarded (`skip_zero_advantage`, on one process): its loss and gradient are zero,
only its tokens count in the denominator, so the update is the same for less work (a minibatch of them
alone gets a zero gradient without a forward, and Adam still makes the update its moments call for).

Losses (workers.engines.objective, formulas in workers.rl.losses): SFT - mean NLL of generated tokens; GRPO - PPO against the behaviour
logprobs (the sampling policy is the "old" one); decoupled PPO - ratio against the proximal policy,
weighted by the capped behaviour weight, optional KPop token filter. The proximal logprobs are those of
the weights at the start of the step: recomputed by one no-grad pass over the batch before the first
update when there are several minibatches; with one minibatch the pre-update weights are the ones the
loss's own forward runs, so its logprobs, detached, are exact and no extra pass is made. `proximal=
"loglinear"` interpolates from per-token versions instead (workers.rl.proximal).

Checkpoints and their RNG states are written and read by workers.engines.checkpoints.

Precision: weights and optimizer state stay float32; on CUDA the forward runs under bf16 autocast
(precision "auto" or "bf16"); CPU runs float32. Nothing here imports Django.
"""

import copy
import json
import math
import os
import shutil
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from workers.engines.checkpoints import (
    STATE_FILE,
    copy_tokenizer_files,
    load_checkpoint_state,
    rng_state,
    seed_everything,
    set_rng_state,
    write_checkpoint,
)
from workers.engines.config import CheckpointInfo, StepMetrics, TrainConfig
from workers.engines.forward import micro_batch_logprobs, plan_micro_batches, resolve_layout
from workers.engines.objective import micro_batch_loss
from workers.engines.schedule import LRSchedule
from workers.rl.advantages import Advantages, GRPOConfig, sample_token_advantages
from workers.rl.packing import pack_sequences, pack_values, packed_token_logprobs, plan_rows, unpack


def _adamw(parameters, config, *, sharded: bool) -> torch.optim.AdamW:
    """AdamW with the fused kernel (one pass over all parameters, CPU and CUDA) where it applies: plain
    float tensors on one device type. Sharded (FSDP) parameters take the multi-tensor (foreach) path. Same
    state either way, so checkpoints move between them."""
    arguments: dict[str, Any] = {
        "lr": config.learning_rate,
        "betas": config.betas,
        "eps": config.adam_eps,
        "weight_decay": config.weight_decay,
    }
    devices = {p.device.type for p in parameters}
    fusable = (
        not sharded
        and devices in ({"cpu"}, {"cuda"})
        and all(p.dtype in (torch.float32, torch.bfloat16, torch.float16) for p in parameters)
    )
    arguments["fused" if fusable else "foreach"] = True
    return torch.optim.AdamW(parameters, **arguments)


class Trainer:
    """Owns a model, its optimizer and schedule. `model_wrapper` (FSDP in workers.engines.distributed) is
    applied before the optimizer is built; `reduce_sum` makes loss denominators global across ranks."""

    def __init__(
        self,
        model_dir,
        config: TrainConfig,
        *,
        device: str | None = None,
        model_wrapper: Callable | None = None,
        reduce_sum: Callable[[int], int] | None = None,
        world_size: int = 1,
    ):
        from transformers import AutoModelForCausalLM

        self.model_dir = Path(model_dir)
        self.config = config
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.reduce_sum = reduce_sum or (lambda value: value)
        self.world_size = world_size
        seed_everything(config.seed)
        model = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=torch.float32)
        if config.gradient_checkpointing:
            model.activation_checkpointing_enable()
        trained: torch.nn.Module = model
        if config.lora is not None:
            from peft import LoraConfig, get_peft_model

            trained = get_peft_model(
                model,
                LoraConfig(
                    r=config.lora.rank,
                    lora_alpha=config.lora.alpha,
                    lora_dropout=config.lora.dropout,
                    target_modules=list(config.lora.target_modules),
                    task_type="CAUSAL_LM",
                ),
            )
        trained.to(self.device)
        trained.train()
        self.model = model_wrapper(trained) if model_wrapper is not None else trained
        self.parameters = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = _adamw(self.parameters, config, sharded=model_wrapper is not None)
        self.schedule = LRSchedule(
            kind=config.schedule,
            base_lr=config.learning_rate,
            warmup_steps=config.warmup_steps,
            total_steps=config.total_steps,
            min_lr_ratio=config.min_lr_ratio,
        )
        self.layout = resolve_layout(_unwrap(model), config.layout, config.attention)
        if model_wrapper is not None and self.layout == "prefix":
            # The prefix layout forwards the root twice before one backward; under FSDP2 on an H100 the
            # backward then read freed unsharded weights (CUDA illegal memory access, bench/gpu/README.md).
            if config.layout == "prefix":
                raise ValueError(
                    "layout 'prefix' cannot run on a sharded (FSDP) model; use 'padded' or 'auto'"
                )
            self.layout = "padded"
        self.step_count = 0
        self.data_position = 0

    # ---- public API ---------------------------------------------------------------------------------

    @classmethod
    def resume(cls, model_dir, checkpoint_path, *, config: TrainConfig | None = None, **kwargs) -> "Trainer":
        """A trainer over the base `model_dir` restored from a checkpoint directory (its config unless given)."""
        state = load_checkpoint_state(Path(checkpoint_path) / STATE_FILE)
        trainer = cls(model_dir, config or TrainConfig.from_dict(state["config"]), **kwargs)
        trainer._load_state(state)
        return trainer

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        wants_bf16 = self.config.precision == "bf16" or (
            self.config.precision == "auto" and self.device.type == "cuda"
        )
        return torch.bfloat16 if wants_bf16 and self.device.type == "cuda" else None

    def step(
        self, samples: Sequence, *, current_version: int | None = None, data_position: int | None = None
    ) -> StepMetrics:
        """One training step over `samples` (workers.rl.samples.TrainingSample or alike). `current_version`
        (the policy version being trained) feeds the log-linear proximal approximation and the staleness
        histogram; `data_position` is recorded for the next checkpoint (default: samples seen so far)."""
        if not samples:
            raise ValueError("a step needs at least one sample")
        started = time.perf_counter()
        config = self.config
        samples = list(samples)
        token_advantages: list[torch.Tensor] = []  # SFT has none
        advantages: Advantages | None = None
        if config.algorithm != "sft":
            token_advantages, advantages = sample_token_advantages(
                samples,
                GRPOConfig(
                    mean_level=config.mean_level,
                    std_level=config.std_level,
                    leave_one_out=config.leave_one_out,
                ),
                gamma=config.turn_discount,
                group_by=config.group_by,
            )
        chunks = _split(len(samples), config.minibatches)
        idle = self._idle_samples(samples, token_advantages)
        recomputed = None
        if config.algorithm == "decoupled_ppo" and config.proximal == "recompute" and len(chunks) > 1:
            recomputed = self._recompute_logprobs(samples)

        totals: Counter[str] = Counter()
        maxima = {"importance": 0.0, "behaviour": 0.0}
        loss_sum = grad_norm = 0.0
        rate = self.schedule.current()
        for chunk in chunks:
            rate = self.schedule.apply(self.optimizer)
            self.optimizer.zero_grad(set_to_none=True)
            denominator = self.reduce_sum(sum(sum(samples[i].loss_mask) for i in chunk))
            active = [i for i in chunk if i not in idle]
            if not active:
                # the gradient is zero, as the forwards would have made it: Adam's update is unchanged
                for parameter in self.parameters:
                    parameter.grad = torch.zeros_like(parameter)
            for row_indices in plan_micro_batches(
                [samples[i].input_ids for i in active],
                [samples[i].loss_mask for i in active],
                config.micro_batch_tokens,
                self.layout,
            ):
                indices = [active[i] for i in row_indices]
                row_loss = self._micro_batch(
                    samples,
                    indices,
                    token_advantages,
                    recomputed,
                    current_version,
                    denominator,
                    totals,
                    maxima,
                )
                loss_sum += row_loss
            grad_norm = self._clip()
            self.optimizer.step()
            self.schedule.advance()
        self.step_count += 1
        self.data_position = data_position if data_position is not None else self.data_position + len(samples)

        seconds = time.perf_counter() - started
        tokens = sum(len(sample.input_ids) for index, sample in enumerate(samples) if index not in idle)
        forwarded = totals["loss_tokens"]  # generated tokens of the samples that ran
        loss_tokens = forwarded + sum(sum(samples[i].loss_mask) for i in idle)
        histogram: Counter[int] = Counter()
        if current_version is not None:
            for sample in samples:
                histogram.update(
                    current_version - v
                    for v, m in zip(sample.versions, sample.loss_mask, strict=True)
                    if m and v >= 0
                )
        kept = max(totals["kept"], 1)
        return StepMetrics(
            step=self.step_count,
            loss=loss_sum / len(chunks),
            learning_rate=rate,
            grad_norm=grad_norm,
            samples=len(samples),
            tokens=tokens,
            loss_tokens=loss_tokens,
            tokens_per_second=tokens / seconds if seconds > 0 else 0.0,
            seconds=seconds,
            reward_mean=advantages.reward_mean if advantages else 0.0,
            reward_std=advantages.reward_std if advantages else 0.0,
            advantage_mean=advantages.advantage_mean if advantages else 0.0,
            advantage_std=advantages.advantage_std if advantages else 0.0,
            advantage_min=min(advantages.values) if advantages else 0.0,
            advantage_max=max(advantages.values) if advantages else 0.0,
            clip_fraction=totals["clipped"] / kept,
            masked_token_fraction=(forwarded - totals["kept"]) / max(forwarded, 1)
            if config.algorithm != "sft"
            else 0.0,
            kl=totals["kl_sum"] / max(forwarded, 1),
            importance_weight_max=maxima["importance"],
            behaviour_weight_max=maxima["behaviour"],
            fallback_groups=len(advantages.fallback_groups) if advantages else 0,
            skipped_samples=len(idle),
            staleness_histogram=tuple(sorted(histogram.items())),
        )

    @torch.no_grad()
    def logprobs(self, sequences: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """Per-token logprobs (aligned with the ids, entry 0 is 0) of each sequence under the current weights."""
        row = pack_sequences(sequences)
        with self._autocast():
            logp = packed_token_logprobs(
                self.model, row, attention=self.config.attention, temperature=self.config.temperature
            )
        return [part.float().cpu() for part in unpack(logp, row)]

    def checkpoint(self, directory, *, data_position: int | None = None, keep: int = 2) -> CheckpointInfo:
        """Writes `directory/step-NNNNNN/` atomically, points `directory/latest` at it and keeps the newest
        `keep` checkpoints (workers.engines.checkpoints)."""
        if data_position is not None:
            self.data_position = data_position
        return write_checkpoint(
            directory,
            self._state(),
            step=self.step_count,
            data_position=self.data_position,
            config=self.config.to_dict(),
            keep=keep,
        )

    def export(self, out_dir) -> Path:
        """A Hugging Face model directory (full weights, LoRA merged; the base's tokenizer files copied)
        that transformers, the embedded server and vLLM load. Written beside and renamed into place."""
        out = Path(out_dir)
        partial = out.with_name(f".{out.name}.partial")
        shutil.rmtree(partial, ignore_errors=True)
        model = _unwrap(self.model)
        if self.config.lora is not None:
            model = copy.deepcopy(model).merge_and_unload()
        model.save_pretrained(partial, safe_serialization=True)
        copy_tokenizer_files(self.model_dir, partial)
        config_path = partial / "config.json"
        data = json.loads(config_path.read_text())
        data["dtype"] = data["torch_dtype"] = "float32"
        config_path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        shutil.rmtree(out, ignore_errors=True)
        os.replace(partial, out)
        return out

    def export_adapter(self, out_dir) -> Path:
        """The LoRA adapter alone (adapter_config.json + weights), for vLLM's LoRA hot-load."""
        if self.config.lora is None:
            raise ValueError("export_adapter needs a LoRA run")
        out = Path(out_dir)
        _unwrap(self.model).save_pretrained(out, safe_serialization=True)
        return out

    # ---- internals --------------------------------------------------------------------------------

    def _autocast(self):
        dtype = self.autocast_dtype
        return torch.autocast(device_type="cuda", dtype=dtype) if dtype is not None else nullcontext()

    def _recompute_logprobs(self, samples) -> list[torch.Tensor]:
        by_index: dict[int, torch.Tensor] = {}
        for row_indices in plan_rows([len(s.input_ids) for s in samples], self.config.micro_batch_tokens):
            parts = self.logprobs([samples[i].input_ids for i in row_indices])
            by_index.update(zip(row_indices, parts, strict=True))
        return [by_index[index] for index in range(len(samples))]

    def _idle_samples(self, samples, token_advantages) -> set[int]:
        """Indices of the samples whose advantage is zero at every token of their loss mask: their loss and
        its gradient are zero (the objective has no term without the advantage), so they need no forward.
        Their tokens still count in the loss's denominator. One process only: under FSDP every rank must run
        the same forwards."""
        if not token_advantages or not self.config.skip_zero_advantage or self.world_size != 1:
            return set()
        return {
            index
            for index, (values, sample) in enumerate(zip(token_advantages, samples, strict=True))
            if not bool(values[torch.tensor(sample.loss_mask, dtype=torch.bool)].any())
        }

    def _micro_batch(
        self,
        samples,
        indices,
        token_advantages,
        recomputed,
        current_version,
        denominator,
        totals: Counter,
        maxima: dict,
    ) -> float:
        config = self.config
        device = self.device
        mask = pack_values([samples[i].loss_mask for i in indices], torch.long).to(device)
        if not int(mask.sum()):
            return 0.0
        with self._autocast():
            logp = micro_batch_logprobs(
                self.model,
                [samples[i].input_ids for i in indices],
                [samples[i].loss_mask for i in indices],
                layout=self.layout,
                attention=config.attention,
                temperature=config.temperature,
            )
        logp = logp.float()
        totals["loss_tokens"] += int(mask.sum())
        loss = micro_batch_loss(
            logp,
            mask,
            samples,
            indices,
            config=config,
            device=device,
            token_advantages=token_advantages,
            recomputed=recomputed,
            current_version=current_version,
            denominator=denominator,
            totals=totals,
            maxima=maxima,
        )
        (loss * self.world_size).backward()  # FSDP averages gradients over ranks; the denominator is global
        return float(loss.detach())

    def _clip(self) -> float:
        limit = self.config.max_grad_norm if self.config.max_grad_norm is not None else math.inf
        clip = getattr(self.model, "clip_grad_norm_", None)  # FSDP1 exposes its own
        norm = clip(limit) if clip is not None else torch.nn.utils.clip_grad_norm_(self.parameters, limit)
        if hasattr(norm, "full_tensor"):  # FSDP2 DTensor
            norm = norm.full_tensor()
        return float(norm)

    def _trainable_state(self) -> dict:
        model = _unwrap(self.model)
        if self.config.lora is not None:
            from peft import get_peft_model_state_dict

            return {
                key: value.detach().cpu().clone() for key, value in get_peft_model_state_dict(model).items()
            }
        return {key: value.detach().cpu().clone() for key, value in model.state_dict().items()}

    def _state(self) -> dict:
        return {
            "model": self._trainable_state(),
            "optimizer": self.optimizer.state_dict(),
            "schedule": self.schedule.state_dict(),
            "rng": rng_state(),
            "step": self.step_count,
            "data_position": self.data_position,
            "config": self.config.to_dict(),
        }

    def _load_state(self, state: dict) -> None:
        model = _unwrap(self.model)
        if self.config.lora is not None:
            from peft import set_peft_model_state_dict

            set_peft_model_state_dict(model, state["model"])
        else:
            model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])
        self.step_count = int(state["step"])
        self.data_position = int(state["data_position"])
        set_rng_state(state["rng"])


def _split(count: int, parts: int) -> list[list[int]]:
    parts = max(1, min(parts, count))
    size, extra = divmod(count, parts)
    chunks, start = [], 0
    for part in range(parts):
        end = start + size + (1 if part < extra else 0)
        chunks.append(list(range(start, end)))
        start = end
    return chunks


def _unwrap(model):
    return getattr(model, "module", model)
