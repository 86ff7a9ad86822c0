"""The inference app's choices and status sets: the one place other apps read them from (models.py re-exports
them for migrations and this app's own code)."""

from django.db import models


class BackendKind(models.TextChoices):
    EMBEDDED = "embedded", "Embedded (areal-web's transformers server)"
    VLLM = "vllm", "vLLM"
    OPENAI_COMPATIBLE = "openai_compatible", "Other OpenAI-compatible server"
    ANTHROPIC = "anthropic", "Anthropic Messages API"


class CapParameter(models.TextChoices):
    """The request field a backend reads the completion cap of a chat completion from. OpenAI's API names it
    max_completion_tokens (its reasoning models refuse max_tokens); vLLM and the embedded server read both;
    some OpenAI-compatible servers read only max_tokens. The legacy completions endpoint always takes
    max_tokens."""

    MAX_TOKENS = "max_tokens", "max_tokens"
    MAX_COMPLETION_TOKENS = "max_completion_tokens", "max_completion_tokens"


class BackendState(models.TextChoices):
    UNKNOWN = "unknown", "Not checked yet"
    UP = "up", "Up"
    DOWN = "down", "Down"
    DRAINING = "draining", "Draining (no new sessions)"
