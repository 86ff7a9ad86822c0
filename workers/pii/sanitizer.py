"""`Sanitizer`: every detector over a text, a JSON-like value or chat messages, and the redaction.

Where findings overlap, their union is redacted once under the most specific type (custom, private_key,
jwt, api_key, aws_access_key, iban, credit_card, email, ip_address, phone), so a card is not also a phone.
Text inside an existing placeholder is never matched again, and `Sanitizer.scan_text` repeats until nothing
new is found, so scanning redacted text finds nothing new. Tenant patterns are compiled once per pattern
set (`sanitizer_for`).

One scan call (`Sanitizer.scan_text`, `scan_value`, `scan_messages`) is bounded by `ScanLimits`: at most
``max_chars`` characters (a string that does not fit in what is left is not scanned) and ``custom_seconds``
for the tenant patterns of all its strings together. The sanitizer fails closed: a string it could not scan
to the end (too large, a tenant pattern out of time, findings still appearing after `MAX_PASSES` passes) is
replaced whole by ``[REDACTED:unscanned]`` and the call lists the type ``unscanned``; callers that block on
findings refuse it like any other.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from bisect import bisect_left
from collections.abc import Sequence

from workers.pii.banking import CARD_DIGITS
from workers.pii.base import (
    MAX_PASSES,
    PLACEHOLDER_TEMPLATE,
    UNSCANNED,
    CustomPattern,
    Finding,
    SanitizeResult,
    ScanLimits,
)
from workers.pii.credentials import is_labelled_aws_secret
from workers.pii.detectors import BUILTIN_DETECTORS, Detector, always
from workers.pii.patterns import compile_patterns, custom_finder
from workers.pii.text import Budget, TextView, Unscannable

_PLACEHOLDER = re.compile(r"\[REDACTED:[A-Za-z0-9_.:-]+\]")
_SHORTEST_BUILTIN_FINDING = 6  # "a@b.co"
_STRUCTURAL_MESSAGE_KEYS = frozenset({"role", "type", "id", "tool_call_id", "tool_use_id"})
_OPAQUE_MESSAGE_KEYS = frozenset({"signature", "image_url", "input_audio", "file"})  # base64 and URLs
_JSON_OPENERS = ("{", "[")
_SMALLEST_CARD_INTEGER = 10 ** (CARD_DIGITS.start - 1)
DEFAULT_LIMITS = ScanLimits()  # frozen: one shared default


class Sanitizer:
    """Finds and redacts personal data and secrets; immutable after construction, safe to share between
    threads. Each scan call gets a fresh budget of `ScanLimits`."""

    def __init__(self, custom_patterns: Sequence[CustomPattern] = (), *, limits: ScanLimits = DEFAULT_LIMITS):
        self._custom_detectors = tuple(
            Detector(entity, always, custom_finder(pattern))
            for entity, pattern in compile_patterns(custom_patterns)
        )
        self._detectors = self._custom_detectors + BUILTIN_DETECTORS
        self.limits = limits

    def scan_text(self, text: str) -> SanitizeResult:
        """Redact until nothing new is found: a redaction can free a neighbour that was rejected as glued
        to it (``a@b.coma@b.com``), so the result is a fixed point and a second scan finds nothing."""
        found: set[str] = set()
        text = self._scan_text(text, found, Budget(self.limits))
        return SanitizeResult(text, tuple(sorted(found)))

    def scan_value(self, value: object) -> tuple[object, tuple[str, ...]]:
        """Any JSON-like value: strings, dict keys and values, list items, card-sized integers."""
        found: set[str] = set()
        try:
            return self._walk(value, found, Budget(self.limits), in_messages=False), tuple(sorted(found))
        except RecursionError:  # nested deeper than can be walked: nothing of it is kept
            return PLACEHOLDER_TEMPLATE.format(entity=UNSCANNED), (UNSCANNED,)

    def scan_messages(self, messages: list[dict]) -> tuple[list, tuple[str, ...]]:
        """OpenAI and Anthropic chat messages: a redacted deep copy. Text, content parts, tool call arguments
        (kept valid JSON), tool_use inputs and tool_result contents are scanned; roles, types, ids,
        thinking signatures and binary parts (images, audio, files, base64 sources) are kept as they are."""
        found: set[str] = set()
        budget = Budget(self.limits)
        return [self._walk(message, found, budget, in_messages=True) for message in messages], tuple(
            sorted(found)
        )

    def _scan_text(self, text: str, found: set[str], budget: Budget) -> str:
        """The redacted text, or the unscanned placeholder when the budget does not cover it."""
        entities: set[str] = set()
        try:
            if not budget.take(len(text)):
                raise Unscannable
            findings = self._findings(text, budget)
            for _ in range(MAX_PASSES):
                if not findings:
                    found.update(entities)
                    return text
                text = _redact(text, findings, entities)
                findings = self._findings(text, budget)
            raise Unscannable  # still finding after every pass: give up on this string, not on safety
        except Unscannable:
            found.add(UNSCANNED)
            return PLACEHOLDER_TEMPLATE.format(entity=UNSCANNED)

    def _findings(self, text: str, budget: Budget) -> list[Finding]:
        if len(text) < _SHORTEST_BUILTIN_FINDING and not self._custom_detectors:
            return []
        view = TextView(text, budget)
        findings = [
            (start, end, detector.rank, detector.entity)
            for detector in self._detectors
            if detector.might_occur(view)
            for start, end in detector.find_spans(view)
        ]
        if findings and "[REDACTED:" in text:
            findings = _outside_placeholders(text, findings)
        return findings

    def _walk(self, value: object, found: set[str], budget: Budget, in_messages: bool) -> object:
        if isinstance(value, str):
            return self._scan_string(value, found, budget, in_messages)
        if isinstance(value, dict):
            return self._walk_dict(value, found, budget, in_messages)
        if isinstance(value, list | tuple):
            return [self._walk(item, found, budget, in_messages) for item in value]
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= _SMALLEST_CARD_INTEGER:
            return self._scan_integer(value, found, budget)
        return copy.deepcopy(value)

    def _walk_dict(self, value: dict, found: set[str], budget: Budget, in_messages: bool) -> dict:
        walked = {}
        for key, item in value.items():
            if in_messages and _is_kept_as_is(key, item):
                walked[key] = copy.deepcopy(item)
            elif is_labelled_aws_secret(key, item):
                walked[key] = PLACEHOLDER_TEMPLATE.format(entity="aws_access_key")
                found.add("aws_access_key")
            else:
                walked[self._walk_key(key, found, budget)] = self._walk(item, found, budget, in_messages)
        return walked

    def _walk_key(self, key: object, found: set[str], budget: Budget) -> object:
        """Field names such as ``tool_calls`` hold nothing a built-in detector finds; other keys are
        scanned, since ids and addresses do appear as keys."""
        is_field_name = isinstance(key, str) and key.isascii() and key.replace("_", "").isalpha()
        if is_field_name and not self._custom_detectors:
            return key
        return self._walk(key, found, budget, in_messages=False)

    def _scan_string(self, value: str, found: set[str], budget: Budget, in_messages: bool) -> str:
        if _looks_like_json(value) and len(value) <= budget.chars_left:
            redacted_json = self._scan_json_string(value, found, budget, in_messages)
            if redacted_json is not None:
                return redacted_json
        return self._scan_text(value, found, budget)

    def _scan_json_string(self, value: str, found: set[str], budget: Budget, in_messages: bool) -> str | None:
        """Tool arguments and JSON tool results are scanned parsed (raw text hides findings behind escapes
        such as ``\\n``) and written back, still valid JSON, only when something was redacted."""
        try:
            parsed = json.loads(value)
        except (ValueError, RecursionError):
            return None
        found_inside: set[str] = set()
        walked = self._walk(parsed, found_inside, budget, in_messages)
        found.update(found_inside)
        return json.dumps(walked, ensure_ascii=False) if found_inside else value

    def _scan_integer(self, value: int, found: set[str], budget: Budget) -> object:
        entities: set[str] = set()
        text = self._scan_text(str(value), entities, budget)
        found.update(entities)
        return text if entities else value


def _is_kept_as_is(key: object, item: object) -> bool:
    """Structural and opaque message fields; an Anthropic image or document source holds base64 or a URL
    (a plain-text source is scanned)."""
    if key in _STRUCTURAL_MESSAGE_KEYS or key in _OPAQUE_MESSAGE_KEYS:
        return True
    return key == "source" and isinstance(item, dict) and item.get("type") != "text"


def _looks_like_json(value: str) -> bool:
    head = value[:1]
    if head.isspace():
        head = value.lstrip()[:1]
    return head in _JSON_OPENERS


def _outside_placeholders(text: str, findings: list[Finding]) -> list[Finding]:
    """Findings that overlap no placeholder. Placeholders do not overlap one another, so sorted by start they
    are sorted by end too: the one that starts last before a finding's end is the only one to check."""
    placeholders = [match.span() for match in _PLACEHOLDER.finditer(text)]
    starts = [start for start, _ in placeholders]
    kept = []
    for finding in findings:
        before = bisect_left(starts, finding[1]) - 1
        if before < 0 or placeholders[before][1] <= finding[0]:
            kept.append(finding)
    return kept


def _redact(text: str, findings: list[Finding], entities: set[str]) -> str:
    pieces, cursor = [], 0
    for start, end, entity in _merge_overlaps(findings):
        pieces += [text[cursor:start], PLACEHOLDER_TEMPLATE.format(entity=entity)]
        cursor = end
        entities.add(entity)
    pieces.append(text[cursor:])
    return "".join(pieces)


def _merge_overlaps(findings: list[Finding]) -> list[tuple[int, int, str]]:
    """Overlapping findings become their union, typed by the most specific member (lowest rank)."""
    merged: list[list] = []
    for start, end, rank, entity in sorted(findings):
        if merged and start < merged[-1][1]:
            last = merged[-1]
            last[1] = max(last[1], end)
            if rank < last[2]:
                last[2:] = [rank, entity]
        else:
            merged.append([start, end, rank, entity])
    return [(start, end, entity) for start, end, _, entity in merged]


def sanitizer_for(custom_patterns: Sequence[CustomPattern], limits: ScanLimits = DEFAULT_LIMITS) -> Sanitizer:
    """The shared Sanitizer for a tenant's pattern set, compiled once (the gateway calls this per request)."""
    return _cached_sanitizer(tuple(custom_patterns), limits)


@functools.lru_cache(maxsize=256)
def _cached_sanitizer(custom_patterns: tuple[CustomPattern, ...], limits: ScanLimits) -> Sanitizer:
    return Sanitizer(custom_patterns, limits=limits)
