"""The rewards app's choices and status sets: the one place other apps read them from (models.py re-exports
them for migrations and this app's own code)."""

from django.db import models


class RewardTarget(models.TextChoices):
    TRAJECTORY = "trajectory"
    STEP = "step"


class RewardKind(models.TextChoices):
    NUMERIC = "numeric"
    BOOLEAN = "boolean"
    CATEGORICAL = "categorical"
    CRITIQUE = "critique"


class RewardSource(models.TextChoices):
    USER = "user"
    ANNOTATOR = "annotator"
    EVALUATOR = "evaluator"
    ENVIRONMENT = "environment"
    AGENT = "agent"
    RULE = "rule"


class RewardTiming(models.TextChoices):
    IMMEDIATE = "immediate"
    DELAYED = "delayed"
    TERMINAL = "terminal"


class Combination(models.TextChoices):
    PRIORITY = "priority"
    WEIGHTED_SUM = "weighted_sum"


class EvaluatorKind(models.TextChoices):
    EXACT_MATCH = "exact_match"
    REGEX = "regex"
    JSON_SCHEMA = "json_schema"
    TOOL_CALL_SUCCEEDED = "tool_call_succeeded"
    PROGRAM = "program"
    LLM_JUDGE = "llm_judge"


class EvaluatorRunStatus(models.TextChoices):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
