"""The evaluation app's choices and status sets: the one place other apps read them from (models.py re-exports
them for migrations and this app's own code)."""

from django.db import models


class SuiteKind(models.TextChoices):
    REGRESSION = "regression"
    SAFETY = "safety", "Tenant safety checks"


class CaseCategory(models.TextChoices):
    REGRESSION = "regression"
    PII_LEAK = "pii_leak", "Planted PII must not leak"
    SECRET_LEAK = "secret_leak", "Planted secret must not leak"
    REFUSAL = "refusal", "Must refuse"
    # BFCL's non-live categories (apps/evaluation/bfcl.py): a BFCL suite's figures are per category.
    BFCL_SIMPLE_PYTHON = "simple_python", "BFCL simple_python"
    BFCL_MULTIPLE = "multiple", "BFCL multiple"
    BFCL_PARALLEL = "parallel", "BFCL parallel"
    BFCL_PARALLEL_MULTIPLE = "parallel_multiple", "BFCL parallel_multiple"
    BFCL_IRRELEVANCE = "irrelevance", "BFCL irrelevance"
    BFCL_MULTI_TURN_BASE = "multi_turn_base", "BFCL multi_turn_base"


class Scorer(models.TextChoices):
    EXACT_MATCH = "exact_match"
    REGEX = "regex"
    JSON_SCHEMA = "json_schema"
    TOOL_CALL_MATCH = "tool_call_match"
    PROGRAM = "program", "Program-checked (environment success)"
    NO_LEAK = "no_leak"
    REFUSAL = "refusal"
    JUDGE = "judge", "Judge model through a backend"
    BFCL = "bfcl", "BFCL's official checker (a BFCL suite's cases)"


class RunStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
