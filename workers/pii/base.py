"""The public types and constants of the PII scan: findings, placeholders, tenant patterns, scan limits.

Each finding is replaced with ``[REDACTED:<type>]``. The types are stable strings (they are stored in ATDP
``pii.entities`` and named in tenant policies); `workers.pii.detectors` lists what each built-in type finds.
"""

from __future__ import annotations

from dataclasses import dataclass

Span = tuple[int, int]
Finding = tuple[int, int, int, str]  # start, end, rank (lower is more specific), entity type

PLACEHOLDER_TEMPLATE = "[REDACTED:{entity}]"
CUSTOM_PREFIX = "custom:"
MAX_CUSTOM_PATTERN_LENGTH = 1000
MAX_CUSTOM_PATTERN_SIZE = 10_000  # the pattern's size with every counted repetition written out
UNSCANNED = "unscanned"  # the type of a string replaced whole because it could not be scanned
MAX_PASSES = 4  # redaction passes over one string (one is the rule, two when a finding frees a neighbour)
SPECIFICITY = (
    "private_key",
    "jwt",
    "api_key",
    "aws_access_key",
    "iban",
    "credit_card",
    "email",
    "ip_address",
    "phone",
)


@dataclass(frozen=True)
class CustomPattern:
    name: str
    regex: str


@dataclass(frozen=True)
class SanitizeResult:
    text: str
    entities: tuple[str, ...]


@dataclass(frozen=True)
class ScanLimits:
    """What one scan call may cost: ``max_chars`` characters scanned (all its strings together) and
    ``custom_seconds`` spent in tenant patterns. Past either, strings are redacted whole as unscanned."""

    max_chars: int = 1 << 20
    custom_seconds: float = 0.25


class InvalidPattern(ValueError):
    def __init__(self, name: str, reason: str):
        super().__init__(f"custom pattern {name!r}: {reason}")
        self.name = name
        self.reason = reason
