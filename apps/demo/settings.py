"""The demo's settings: every DEMO_* knob of the environment, with its default, read in one place.

DEMO_VAR_DIR (var/demo: the demo's own state), DEMO_KEEP (1: keep var/demo and add a run to it), DEMO_EXIT
(1: exit after the table), DEMO_APPROVE (manual: an operator approves releases in the console),
DEMO_FRESH_BASE (1: train the warm-up's base again), DEMO_SEED (0), DEMO_BUDGET_SECONDS (300: the loop's
wall-time budget, counted from the base's held-out measurement; the warm-up is timed apart),
DEMO_SKILL_STEPS (200), DEMO_SFT_STEPS (60), DEMO_SFT_BATCH (16 episodes a step), DEMO_SFT_LR (1e-3), DEMO_USERS (3), DEMO_HELDOUT (64 cases),
DEMO_ETA (8: production lags the learner by the versions a release takes), DEMO_BATCH (16 samples per step),
DEMO_PUBLISH_EVERY (1), DEMO_EVAL_EVERY (2 versions), DEMO_LR (1e-4), DEMO_TOLERANCE (0.05),
DEMO_CANARY_PERCENT (50), DEMO_CANARY_SECONDS (10), DEMO_ANNOTATOR_SHARE (0.3), DEMO_SUMMARY (a JSON file;
default var/demo/demo-summary.json), DEMO_SCENARIO (empty: none; a name of workers.envs.scenarios.SCENARIOS:
the world the traffic meets, see apps/demo/scenario.py), DEMO_SCENARIO_AT (empty: the scenario's own time;
seconds after the traffic starts at which its trigger switches), DEMO_MODEL (default: the project's own
few-million-parameter model; smollm2: SmolLM2-135M-Instruct, a real pretrained model converted by
workers.models, with its own defaults in MODEL_DEFAULTS).
"""

import os
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

MODEL = "weather"  # the model each run registers: weather, then weather-2, weather-3... under DEMO_KEEP=1
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


def demo_model() -> str:
    name = os.environ.get("DEMO_MODEL", "").strip() or "default"
    if name not in MODEL_DEFAULTS:
        raise ValueError(f"DEMO_MODEL={name!r} is not one of {', '.join(sorted(MODEL_DEFAULTS))}")
    return name


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, MODEL_DEFAULTS[demo_model()].get(name, default)))


def _env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, MODEL_DEFAULTS[demo_model()].get(name, default)))


@dataclass(frozen=True)
class DemoSettings:
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
    annotator_share: float
    scenario: str  # empty: no scenario (the demo as it was)
    scenario_at: float | None  # None: the scenario's own trigger time

    def __post_init__(self):
        from workers.envs.scenarios import scenario_named

        scenario_named(self.scenario, at=self.scenario_at)  # an unknown name fails here, before the warm-up

    @classmethod
    def from_environment(cls) -> "DemoSettings":
        return cls(
            base_model=demo_model(),
            var_dir=Path(os.environ.get("DEMO_VAR_DIR", settings.BASE_DIR / "var" / "demo")).resolve(),
            keep=os.environ.get("DEMO_KEEP") == "1",
            exit_after_table=os.environ.get("DEMO_EXIT") == "1",
            approve_manually=os.environ.get("DEMO_APPROVE") == "manual",
            fresh_base=os.environ.get("DEMO_FRESH_BASE") == "1",
            summary_path=os.environ.get("DEMO_SUMMARY") or "",
            seed=_env_int("DEMO_SEED", 0),
            budget_seconds=_env_float("DEMO_BUDGET_SECONDS", 300),
            skill_steps=_env_int("DEMO_SKILL_STEPS", 200),
            sft_steps=_env_int("DEMO_SFT_STEPS", 60),
            sft_batch=_env_int("DEMO_SFT_BATCH", 16),
            sft_learning_rate=_env_float("DEMO_SFT_LR", 1e-3),
            users=_env_int("DEMO_USERS", 3),
            heldout_cases=_env_int("DEMO_HELDOUT", 64),
            eta=_env_int("DEMO_ETA", 8),
            batch=_env_int("DEMO_BATCH", 16),
            publish_every=_env_int("DEMO_PUBLISH_EVERY", 1),
            eval_every=_env_int("DEMO_EVAL_EVERY", 2),
            learning_rate=_env_float("DEMO_LR", 1e-4),
            tolerance=_env_float("DEMO_TOLERANCE", 0.05),
            canary_percent=_env_float("DEMO_CANARY_PERCENT", 50),
            canary_seconds=_env_int("DEMO_CANARY_SECONDS", 10),
            annotator_share=_env_float("DEMO_ANNOTATOR_SHARE", 0.3),
            scenario=os.environ.get("DEMO_SCENARIO", "").strip(),
            scenario_at=float(os.environ["DEMO_SCENARIO_AT"]) if os.environ.get("DEMO_SCENARIO_AT") else None,
        )
