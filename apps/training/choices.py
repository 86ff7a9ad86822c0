"""The training app's choices and status sets: the one place other apps read them from (models.py re-exports
them for migrations and this app's own code)."""

from django.db import models


class VersionStatus(models.TextChoices):
    TRAINING = "training"
    CANDIDATE = "candidate"
    CANARY = "canary"
    PRODUCTION = "production"
    RETIRED = "retired"
    ROLLED_BACK = "rolled_back"


class JobStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


JOB_FINAL = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})


class Algorithm(models.TextChoices):
    SFT = "sft", "SFT"
    GRPO = "grpo", "GRPO"
    DECOUPLED_PPO = "decoupled_ppo", "Decoupled PPO (AReaL)"


class OnlineRunStatus(models.TextChoices):
    RUNNING = "running"
    STOPPED = "stopped"
    FAILED = "failed"
