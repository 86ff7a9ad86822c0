"""The demo's configuration: every DEMO_* knob of the environment, with its default, read in one place.

DEMO_VAR_DIR (var/demo: the demo's own state), DEMO_KEEP (1: keep var/demo and add a run to it), DEMO_EXIT
(1: exit after the table), DEMO_APPROVE (manual: an operator approves releases in the console),
DEMO_FRESH_BASE (1: train the warm-up's base again), DEMO_SEED (0), DEMO_BUDGET_SECONDS (300: the loop's
wall-time budget, counted from the base's held-out measurement; the warm-up is timed apart),
DEMO_SKILL_STEPS (200), DEMO_SFT_STEPS (60), DEMO_SFT_BATCH (16 episodes a step), DEMO_SFT_LR (1e-3), DEMO_USERS (3), DEMO_HELDOUT (64 cases),
DEMO_ETA (8: production lags the learner by the versions a release takes), DEMO_ROLLOUT_BOUND (ρ: RL sessions
let out ahead of the learner, in steps' worth; -1, the default: η; 1 under DEMO_TASK=bfcl), DEMO_BATCH (16 samples per step),
DEMO_PUBLISH_EVERY (1), DEMO_EVAL_EVERY (2 versions), DEMO_LR (1e-4), DEMO_TOLERANCE (0.05),
DEMO_CANARY_PERCENT (50), DEMO_CANARY_SECONDS (10), DEMO_CANARY_PATIENCE (30 analyses, 3 s apart, before an
inconclusive canary is aborted; 80 under DEMO_TASK=bfcl), DEMO_ANNOTATOR_SHARE (0.3), DEMO_SUMMARY (a JSON file;
default var/demo/demo-summary.json), DEMO_SCENARIO (empty: none; a name of workers.envs.scenarios.SCENARIOS:
the world the traffic meets, see demo/scenario.py), DEMO_SCENARIO_AT (empty: the scenario's own time;
seconds after the traffic starts at which its trigger switches), DEMO_MODEL (default: the project's own
few-million-parameter model; smollm2: SmolLM2-135M-Instruct, a real pretrained model converted by
workers.models, with its own defaults in MODEL_DEFAULTS), DEMO_TASK (weather: the weather desk; bfcl: the
Berkeley Function Calling Leaderboard, workers/envs/bfcl, with SmolLM2 and the defaults of TASK_DEFAULTS),
DEMO_BFCL_CATEGORIES (comma-separated single-turn categories; default all five), DEMO_BFCL_DEMOS (the
warm-up's demonstrations from the train split's ground truth), DEMO_BFCL_GROUP (1: each answer's GRPO group is
its case's category; k > 1: a user answers one case k times at once, the k answers one group, and the learner
takes whole groups, those whose answers all scored alike untrained), DEMO_TRAINER_NICENESS (the train worker's
niceness, AREAL_TRAINING_NICENESS; 0, under DEMO_TASK=bfcl 10), DEMO_GATE_THREADS (the eval worker's torch
threads for an environment gate, AREAL_GATE_THREADS; 0: torch's choice, under DEMO_TASK=bfcl 1). Under
DEMO_TASK=bfcl, DEMO_HELDOUT is held-out cases per category.
"""

from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from areal_web.env import env_str

MODEL = "weather"  # the model each run registers: weather, then weather-2, weather-3... under DEMO_KEEP=1
TASK_MODELS = {"weather": MODEL, "bfcl": "bfcl"}  # DEMO_TASK → the model's name (bfcl, bfcl-2...)
TENANT = "demo"
DEMO_DIR_MARKER = ".areal-demo"  # marks a directory the demo made, so that a reset removes nothing else


# DEMO_MODEL: the base the demo starts from, and the settings whose defaults differ for it (an environment
# variable still wins). SmolLM2 can already copy a city into a call and a number into an answer, so it needs
# no skill warm-up; a short SFT at a fine-tuning rate teaches it the tool-call format together with the legacy
# agent's habit, and its steps train ~30x the default model's arithmetic, so the loop gets a longer budget.
MODEL_DEFAULTS: dict[str, dict[str, float]] = {
    "default": {},
    "smollm2": {
        "DEMO_BUDGET_SECONDS": 1800,
        "DEMO_SKILL_STEPS": 0,
        "DEMO_SFT_STEPS": 10,
        "DEMO_SFT_BATCH": 8,
        "DEMO_SFT_LR": 3e-5,
        "DEMO_LR": 1e-5,
        "DEMO_BATCH": 16,
        "DEMO_HELDOUT": 48,
    },
}


# DEMO_TASK=bfcl: BFCL's single-turn categories with SmolLM2 (the default model has no language to call
# functions with). multi_turn_base is left out: its prompts are 2,200-5,100 tokens at their first turn with
# SmolLM2's tokenizer (the tools of its API classes) and grow each step; they fit SmolLM2's 8,192 positions
# but a case is several such forwards, and a training sample one, which 2 CPU cores cannot afford in a
# 15-minute loop. The single-turn prompts are 205-1,059 tokens.
TASK_DEFAULTS: dict[str, dict[str, float]] = {
    "weather": {},
    "bfcl": {
        "DEMO_BUDGET_SECONDS": 900,
        "DEMO_SFT_STEPS": 30,
        "DEMO_SFT_BATCH": 8,
        "DEMO_SFT_LR": 5e-5,
        "DEMO_BFCL_DEMOS": 240,
        "DEMO_LR": 1e-5,
        "DEMO_BATCH": 8,
        # η wide and ρ narrow (AReaL's bound at the rollout side): production serves the agent's traffic
        # versions behind the learner (a release takes a gate and a canary), so with η = 4 a third of what it
        # served aged past η and was dropped; at η = 8 alone nothing aged out but the gateway let out more
        # sessions than the learner could train. ρ = 1 lets out (1 + v + 1)·B sessions: seeds 0 and 1 each
        # trained on 72 of 72 settled trajectories, none stale, at level accuracy (bench/bfcl/README.md).
        "DEMO_ETA": 8,
        "DEMO_ROLLOUT_BOUND": 1,
        "DEMO_HELDOUT": 10,
        "DEMO_USERS": 2,
        "DEMO_EVAL_EVERY": 2,
        # Tokens per micro-batch of the warm-up and the online trainer (gradient accumulation: the same
        # update in smaller forwards). Without a varlen kernel a micro-batch is padded and every layer keeps
        # its [B, heads, L, L] attention for the backward pass. Three warm-up batches of 8 peaked at 12.2 GB
        # at 8,192 tokens (the demo's warm-up and the train worker together overran 24 GB), 6.4 GB at 2,048,
        # which also ran 1.5x faster. Not lower: a sample must fit one micro-batch, and BFCL's single-turn
        # prompts reach 1,059 tokens with SmolLM2's tokenizer.
        "DEMO_MICRO_BATCH_TOKENS": 2048,
        # The train worker's niceness (AREAL_TRAINING_NICENESS): a candidate's gate (50 held-out prompts
        # answered in the eval worker) and the traffic's two inference servers take the cores before the
        # next training step does, so that a release fits the loop.
        "DEMO_TRAINER_NICENESS": 10,
        # BFCL's users send a case every ~7 s between them (SmolLM2 on a shared core), so a canary at 50 %
        # of new sessions reaches 10 rewarded samples per arm in 2-4 minutes, not the weather desk's 90 s.
        "DEMO_CANARY_PATIENCE": 80,
        # The gate's engine on one torch thread (AREAL_GATE_THREADS): beside two serving processes and the
        # trainer, two threads wait on each other at every operation. 15 held-out cases under such a load
        # (bench/bfcl/README.md): 129.5 s on two threads, 70.9 s on one.
        "DEMO_GATE_THREADS": 1,
    },
}
BFCL_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")


def demo_task() -> str:
    name = env_str("DEMO_TASK", "").strip() or "weather"
    if name not in TASK_DEFAULTS:
        raise ValueError(f"DEMO_TASK={name!r} is not one of {', '.join(sorted(TASK_DEFAULTS))}")
    return name


def demo_model() -> str:
    default = "smollm2" if demo_task() == "bfcl" else "default"
    name = env_str("DEMO_MODEL", "").strip() or default
    if name not in MODEL_DEFAULTS:
        raise ValueError(f"DEMO_MODEL={name!r} is not one of {', '.join(sorted(MODEL_DEFAULTS))}")
    if demo_task() == "bfcl" and name != "smollm2":
        raise ValueError(
            "DEMO_TASK=bfcl runs with DEMO_MODEL=smollm2 (the default model cannot call functions)"
        )
    return name


def _default(name: str, default: float) -> float:
    """The environment's value, else the task's default, else the model's, else `default`."""
    value = env_str(name, "")
    if value:
        return float(value)
    return TASK_DEFAULTS[demo_task()].get(name, MODEL_DEFAULTS[demo_model()].get(name, default))


def _env_int(name: str, default: int) -> int:
    value = _default(name, default)
    if value != int(value):
        raise ValueError(f"{name}={value!r} is not a whole number")
    return int(value)


def _rollout_bound() -> int | None:
    bound = _env_int("DEMO_ROLLOUT_BOUND", -1)
    return None if bound < 0 else bound


def _env_float(name: str, default: float) -> float:
    return float(_default(name, default))


def _bfcl_categories() -> tuple[str, ...]:
    named = [part.strip() for part in env_str("DEMO_BFCL_CATEGORIES", "").split(",") if part.strip()]
    unknown = [name for name in named if name not in BFCL_CATEGORIES]
    if unknown:
        raise ValueError(
            f"DEMO_BFCL_CATEGORIES: {', '.join(unknown)} not among {', '.join(BFCL_CATEGORIES)} "
            "(multi_turn_base does not fit the CPU loop; the live_* categories are never used)"
        )
    return tuple(named) or BFCL_CATEGORIES


@dataclass(frozen=True)
class DemoConfig:
    base_model: str  # a key of MODEL_DEFAULTS
    var_dir: Path
    keep: bool
    exit_after_table: bool
    approve_manually: bool
    fresh_base: bool
    summary_path: str  # empty: demo-summary.json in the var directory
    seed: int
    budget_seconds: float
    skill_steps: int
    sft_steps: int
    sft_batch: int
    sft_learning_rate: float
    users: int
    heldout_cases: int
    eta: int
    batch: int
    publish_every: int
    eval_every: int
    learning_rate: float
    tolerance: float
    canary_percent: float
    canary_seconds: int
    canary_patience: int
    annotator_share: float
    scenario: str  # empty: no scenario (the demo as it was)
    scenario_at: float | None  # None: the scenario's own trigger time
    task: str = "weather"  # a key of TASK_DEFAULTS
    bfcl_categories: tuple[str, ...] = BFCL_CATEGORIES
    bfcl_demonstrations: int = 240
    micro_batch_tokens: int = 8192
    trainer_niceness: int = 0
    gate_threads: int = 0
    bfcl_group: int = 1  # answers per case in one GRPO group (1: the group is the category)
    rollout_bound: int | None = None  # None: η

    @property
    def model_name(self) -> str:
        return TASK_MODELS[self.task]

    def __post_init__(self):
        from workers.envs.scenarios import scenario_named

        scenario_named(self.scenario, at=self.scenario_at)  # an unknown name fails here, before the warm-up
        if self.bfcl_group < 1:
            raise ValueError(f"DEMO_BFCL_GROUP={self.bfcl_group}: answers per case, at least 1")
        if self.task == "bfcl" and self.scenario:
            raise ValueError("DEMO_SCENARIO plays in the weather desk's world; DEMO_TASK=bfcl has none")

    @classmethod
    def from_environment(cls) -> "DemoConfig":
        return cls(
            base_model=demo_model(),
            var_dir=Path(env_str("DEMO_VAR_DIR", settings.BASE_DIR / "var" / "demo")).resolve(),
            keep=env_str("DEMO_KEEP", "") == "1",
            exit_after_table=env_str("DEMO_EXIT", "") == "1",
            approve_manually=env_str("DEMO_APPROVE", "") == "manual",
            fresh_base=env_str("DEMO_FRESH_BASE", "") == "1",
            summary_path=env_str("DEMO_SUMMARY", ""),
            seed=_env_int("DEMO_SEED", 0),
            budget_seconds=_env_float("DEMO_BUDGET_SECONDS", 300),
            skill_steps=_env_int("DEMO_SKILL_STEPS", 200),
            sft_steps=_env_int("DEMO_SFT_STEPS", 60),
            sft_batch=_env_int("DEMO_SFT_BATCH", 16),
            sft_learning_rate=_env_float("DEMO_SFT_LR", 1e-3),
            users=_env_int("DEMO_USERS", 3),
            heldout_cases=_env_int("DEMO_HELDOUT", 64),
            eta=_env_int("DEMO_ETA", 8),
            rollout_bound=_rollout_bound(),
            batch=_env_int("DEMO_BATCH", 16),
            publish_every=_env_int("DEMO_PUBLISH_EVERY", 1),
            eval_every=_env_int("DEMO_EVAL_EVERY", 2),
            learning_rate=_env_float("DEMO_LR", 1e-4),
            tolerance=_env_float("DEMO_TOLERANCE", 0.05),
            canary_percent=_env_float("DEMO_CANARY_PERCENT", 50),
            canary_seconds=_env_int("DEMO_CANARY_SECONDS", 10),
            canary_patience=_env_int("DEMO_CANARY_PATIENCE", 30),
            annotator_share=_env_float("DEMO_ANNOTATOR_SHARE", 0.3),
            scenario=env_str("DEMO_SCENARIO", "").strip(),
            scenario_at=float(env_str("DEMO_SCENARIO_AT")) if env_str("DEMO_SCENARIO_AT", "") else None,
            task=demo_task(),
            bfcl_categories=_bfcl_categories(),
            bfcl_demonstrations=_env_int("DEMO_BFCL_DEMOS", 240),
            bfcl_group=_env_int("DEMO_BFCL_GROUP", 1),
            micro_batch_tokens=_env_int("DEMO_MICRO_BATCH_TOKENS", 8192),
            trainer_niceness=_env_int("DEMO_TRAINER_NICENESS", 0),
            gate_threads=_env_int("DEMO_GATE_THREADS", 0),
        )
