"""What goes into and comes out of the training engine: frozen dataclasses, no torch objects.

TrainConfig is JSON-able (`to_dict` / `from_dict`), so a job row stores it and a checkpoint carries it.
"""

from dataclasses import asdict, dataclass, field, fields

ALGORITHMS = ("sft", "grpo", "decoupled_ppo")
SCHEDULES = ("constant", "linear", "cosine")
PROXIMAL_METHODS = ("recompute", "loglinear")
PRECISIONS = ("auto", "float32", "bf16")
LAYOUTS = ("auto", "packed", "padded", "prefix")  # workers.engines.forward


@dataclass(frozen=True)
class LoraSettings:
    rank: int = 8
    alpha: int = 16
    dropout: float = 0.0
    target_modules: tuple[str, ...] = (
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    )

    def __post_init__(self):
        if self.rank <= 0 or self.alpha <= 0 or not 0 <= self.dropout < 1:
            raise ValueError("LoRA needs rank > 0, alpha > 0 and dropout in [0, 1)")


@dataclass(frozen=True)
class TrainConfig:
    algorithm: str = "grpo"
    learning_rate: float = 1e-5
    schedule: str = "constant"
    warmup_steps: int = 0
    total_steps: int = 1  # optimizer updates the schedule spans (linear / cosine decay to min_lr_ratio)
    min_lr_ratio: float = 0.0
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-8
    max_grad_norm: float | None = 1.0  # None: no clipping
    micro_batch_tokens: int = 4096  # packed-row budget: each row is one micro-batch (gradient accumulation)
    minibatches: int = 1  # optimizer updates per step(): the batch is split in this many (PPO epochs of 1)
    precision: str = "auto"  # auto: bf16 autocast on CUDA, float32 on CPU
    seed: int = 0
    attention: str = "auto"  # workers.rl.packing: auto / mask / varlen
    layout: str = "auto"  # workers.engines.forward: auto / packed / padded / prefix
    temperature: float = 1.0  # logprobs are computed at the sampling temperature
    # GRPO / PPO
    group_by: str = "group_id"  # or task_id
    mean_level: str = "group"
    std_level: str = "group"
    leave_one_out: bool = False
    turn_discount: float = 1.0
    # AReaL's backpropagation of per-step rewards (workers.rl.step_rewards); None: a step without its own
    # reward trains with the trajectory's
    reward_discount: float | None = None
    eps_clip: float = 0.2
    eps_clip_high: float | None = None
    behaviour_weight_cap: float | None = 5.0  # decoupled PPO only
    cap_mode: str = "clamp"
    proximal: str = "recompute"  # decoupled PPO: recompute (pre-update weights) or loglinear
    kpop_threshold: float | None = None  # off-policy token filter (decoupled PPO); None: off
    # A sample whose advantage is zero at every token (a GRPO group whose rewards were all equal) adds
    # nothing to the gradient: its forward and backward are skipped, the update unchanged (one process only)
    skip_zero_advantage: bool = True
    # Online runs (apps/loop/training_runs.py, workers.rl.staleness): a step takes a GRPO group (by group_id)
    # only once none of its sessions is undecided (open, or not yet qualified), and takes all of it, so that
    # no answer is weighed against a part of its group; with skip_uniform_groups (DAPO's dynamic sampling) a
    # settled group whose rewards are all alike is consumed untrained, freeing its place in the rollout bound
    whole_groups: bool = False
    skip_uniform_groups: bool = False
    # LoRA (peft); None: full fine-tuning
    lora: LoraSettings | None = None
    gradient_checkpointing: bool = False

    def __post_init__(self):
        problems = []
        if self.algorithm not in ALGORITHMS:
            problems.append(f"algorithm must be one of {ALGORITHMS}")
        if self.schedule not in SCHEDULES:
            problems.append(f"schedule must be one of {SCHEDULES}")
        if self.proximal not in PROXIMAL_METHODS:
            problems.append(f"proximal must be one of {PROXIMAL_METHODS}")
        if self.layout not in LAYOUTS:
            problems.append(f"layout must be one of {LAYOUTS}")
        if self.precision not in PRECISIONS:
            problems.append(f"precision must be one of {PRECISIONS}")
        if self.learning_rate <= 0:
            problems.append("learning_rate must be > 0")
        if self.total_steps < 1 or self.warmup_steps < 0 or self.minibatches < 1:
            problems.append("total_steps and minibatches must be >= 1, warmup_steps >= 0")
        if self.micro_batch_tokens < 8:
            problems.append("micro_batch_tokens must be >= 8")
        if not 0 <= self.min_lr_ratio <= 1:
            problems.append("min_lr_ratio must be in [0, 1]")
        if self.max_grad_norm is not None and self.max_grad_norm <= 0:
            problems.append("max_grad_norm must be > 0 or None")
        if self.temperature <= 0:
            problems.append("temperature must be > 0")
        if self.reward_discount is not None and not 0 < self.reward_discount <= 1:
            problems.append("reward_discount must be in (0, 1] or None")
        if self.whole_groups and self.group_by != "group_id":
            problems.append("whole_groups needs group_by group_id (a session's group is what settles)")
        if self.skip_uniform_groups and not (self.whole_groups and self.mean_level == "group"):
            problems.append("skip_uniform_groups needs whole_groups and mean_level group")
        if problems:
            raise ValueError("; ".join(problems))

    def to_dict(self) -> dict:
        data = asdict(self)
        data["betas"] = list(self.betas)
        if self.lora is not None:
            data["lora"]["target_modules"] = list(self.lora.target_modules)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown training settings: {sorted(unknown)}")
        values = dict(data)
        if "betas" in values:
            values["betas"] = tuple(values["betas"])
        if values.get("lora") is not None and not isinstance(values["lora"], LoraSettings):
            lora = dict(values["lora"])
            if "target_modules" in lora:
                lora["target_modules"] = tuple(lora["target_modules"])
            values["lora"] = LoraSettings(**lora)
        return cls(**values)


@dataclass(frozen=True)
class StepMetrics:
    step: int  # optimizer steps done after this call (1-based count of step() calls, not of updates)
    loss: float
    learning_rate: float
    grad_norm: float  # before clipping (the last update's)
    samples: int
    tokens: int  # every token forwarded (context + generated)
    loss_tokens: int  # generated tokens in the loss mask (of every sample, skipped ones included)
    tokens_per_second: float  # tokens / seconds of the step
    seconds: float
    reward_mean: float = 0.0
    reward_std: float = 0.0
    advantage_mean: float = 0.0
    advantage_std: float = 0.0
    advantage_min: float = 0.0
    advantage_max: float = 0.0
    clip_fraction: float = 0.0
    masked_token_fraction: float = 0.0  # filtered by KPop or a mask-mode cap, of the forwarded loss mask
    kl: float = 0.0  # mean over forwarded generated tokens of (logp - logp_behaviour)^2 / 2 before the update
    importance_weight_max: float = 0.0
    behaviour_weight_max: float = 0.0
    fallback_groups: int = 0  # single-sample GRPO groups that used the batch baseline
    skipped_samples: int = 0  # zero-advantage samples not forwarded (TrainConfig.skip_zero_advantage)
    staleness_histogram: tuple[tuple[int, int], ...] = field(default_factory=tuple)  # (V - v, tokens)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["staleness_histogram"] = [list(pair) for pair in self.staleness_histogram]
        return data


@dataclass(frozen=True)
class CheckpointInfo:
    path: str
    step: int
    data_position: int
