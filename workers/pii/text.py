"""What every detector shares: a text with its byte "shape" and numeric clusters computed once, the budget
of one scan call, and the match loops that resume correctly after a rejected candidate.

Speed: the digit detectors first look in the shape of the text (digits mapped to ``0``, letters to
``A``/``a``) for the separators they need, then run only inside numeric clusters found by one scan.
"""

from __future__ import annotations

import functools
import re
import string
import time
from collections.abc import Callable, Iterator

from workers.pii.base import ScanLimits, Span

WORD_CHARS = frozenset(string.ascii_letters + string.digits + "_")
TOKEN_CHARS = WORD_CHARS | {"-"}
ALNUM_CHARS = frozenset(string.ascii_letters + string.digits)
HEX_CHARS = frozenset(string.hexdigits)
_NUMERIC_CLUSTER = re.compile(r"[+(0-9][0-9 ().+-]{6,}")  # holds every phone, card and IPv4 address


def _build_shape_table() -> bytes:
    table = bytearray(range(256))
    for first, last, shape in (("0", "9", "0"), ("A", "Z", "A"), ("a", "z", "a")):
        for byte in range(ord(first), ord(last) + 1):
            table[byte] = ord(shape)
    return bytes(table)


_SHAPE_TABLE = _build_shape_table()


class Unscannable(Exception):
    """A string cannot be scanned to the end within the call's limits; it is redacted whole."""


class Budget:
    """What is left of one scan call's `ScanLimits`."""

    def __init__(self, limits: ScanLimits):
        self.chars_left = limits.max_chars
        self.custom_deadline = time.monotonic() + limits.custom_seconds

    def take(self, characters: int) -> bool:
        if characters > self.chars_left:
            return False
        self.chars_left -= characters
        return True

    def custom_seconds_left(self) -> float:
        left = self.custom_deadline - time.monotonic()
        if left <= 0:
            raise Unscannable
        return left


class TextView:
    """A text and what the detectors share about it, each computed on first use."""

    def __init__(self, text: str, budget: Budget | None = None):
        self.text = text
        self.budget = budget or Budget(ScanLimits())

    @functools.cached_property
    def shape(self) -> bytes:
        """UTF-8 bytes with every ASCII digit turned into ``0`` and letters into ``A`` or ``a``."""
        return self.text.encode("utf-8", "surrogatepass").translate(_SHAPE_TABLE)

    @functools.cached_property
    def digit_count(self) -> int:
        return self.shape.count(b"0")

    @functools.cached_property
    def numeric_clusters(self) -> list[Span]:
        return [match.span() for match in _NUMERIC_CLUSTER.finditer(self.text)]


def char_before(text: str, index: int) -> str:
    return text[index - 1] if index > 0 else ""


def char_after(text: str, index: int) -> str:
    return text[index] if index < len(text) else ""


def stands_alone(text: str, span: Span, neighbours: frozenset[str]) -> bool:
    return char_before(text, span[0]) not in neighbours and char_after(text, span[1]) not in neighbours


Validator = Callable[[str, re.Match[str]], Span | None]


def rechecked_matches(
    pattern: re.Pattern[str], text: str, validate: Validator, start: int = 0, end: int | None = None
) -> Iterator[Span]:
    """Validated spans; after a rejected match the search resumes one character on, so a real finding that
    starts inside a rejected one is not skipped."""
    end = len(text) if end is None else end
    while match := pattern.search(text, start, end):
        span = validate(text, match)
        if span:
            yield span
        start = span[1] if span else match.start() + 1


def checked_matches(pattern: re.Pattern[str], text: str, validate: Validator) -> Iterator[Span]:
    """Validated spans of non-overlapping matches, for tokens: a match that starts inside a rejected token
    is glued to it and would be rejected too, so the search resumes after the whole token."""
    for match in pattern.finditer(text):
        if span := validate(text, match):
            yield span


def in_numeric_clusters(
    pattern: re.Pattern[str], validate: Validator, shortest: int
) -> Callable[[TextView], Iterator[Span]]:
    def find(view: TextView) -> Iterator[Span]:
        for start, end in view.numeric_clusters:
            if end - start >= shortest:  # one character past the cluster feeds the pattern's lookahead
                end_with_context = min(end + 1, len(view.text))
                yield from rechecked_matches(pattern, view.text, validate, start, end_with_context)

    return find
