"""The training engine (Django-free): Trainer, its config and metrics. See README.md."""

from workers.engines.checkpoints import latest_checkpoint
from workers.engines.config import CheckpointInfo, LoraSettings, StepMetrics, TrainConfig
from workers.engines.data import plan_batches
from workers.engines.trainer import Trainer

__all__ = [
    "CheckpointInfo",
    "LoraSettings",
    "StepMetrics",
    "TrainConfig",
    "Trainer",
    "latest_checkpoint",
    "plan_batches",
]
