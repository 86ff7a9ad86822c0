"""Detection and redaction of personal data and secrets (Django-free); see README.md.

`Sanitizer` scans text, JSON-like values and chat messages and replaces each finding with
``[REDACTED:<type>]``; `patterns_from_policy` / `compile_patterns` are the one validation of tenant patterns.
"""

from workers.pii.base import (
    CUSTOM_PREFIX,
    MAX_CUSTOM_PATTERN_LENGTH,
    MAX_CUSTOM_PATTERN_SIZE,
    MAX_PASSES,
    PLACEHOLDER_TEMPLATE,
    SPECIFICITY,
    UNSCANNED,
    CustomPattern,
    InvalidPattern,
    SanitizeResult,
    ScanLimits,
)
from workers.pii.patterns import compile_patterns, patterns_from_policy
from workers.pii.sanitizer import Sanitizer, sanitizer_for

__all__ = [
    "CUSTOM_PREFIX",
    "MAX_CUSTOM_PATTERN_LENGTH",
    "MAX_CUSTOM_PATTERN_SIZE",
    "MAX_PASSES",
    "PLACEHOLDER_TEMPLATE",
    "SPECIFICITY",
    "UNSCANNED",
    "CustomPattern",
    "InvalidPattern",
    "SanitizeResult",
    "ScanLimits",
    "Sanitizer",
    "compile_patterns",
    "patterns_from_policy",
    "sanitizer_for",
]
