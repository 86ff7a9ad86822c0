"""Tenant patterns (``custom:<name>``): the one validation of a tenant's PII patterns, and their matcher.

Python `re` syntax, validated by `compile_patterns` (or `patterns_from_policy` for the JSON a policy
stores; the policy service and the console form call it before saving, the gateway before scanning): a name
of 1-64 characters, at most 1000 characters of pattern, no pattern matching the empty string, none whose
repetitions expand past `MAX_CUSTOM_PATTERN_SIZE` (compiling ``(?:a{1000}){1000}`` alone takes seconds and
hundreds of MB). They run on the `regex` module, which releases the GIL while it matches and stops a match
at a timeout, so a catastrophic pattern such as ``(a+)+$`` costs at most the time left to the scan call.

`tenant_regex` and `tenant_regex_search` are the same validation and the same bounded matching for every
other regular expression a tenant writes (reward evaluators, eval scorers): no tenant pattern runs on `re`.
"""

from __future__ import annotations

import re
import re._constants as _sre_constants  # type: ignore[import-not-found]  # private: no typeshed stub
import re._parser as _sre_parser  # type: ignore[import-not-found]  # private: no typeshed stub
from collections.abc import Callable, Iterator, Sequence

import regex

from workers.pii.base import (
    CUSTOM_PREFIX,
    MAX_CUSTOM_PATTERN_LENGTH,
    MAX_CUSTOM_PATTERN_SIZE,
    CustomPattern,
    InvalidPattern,
    Span,
)
from workers.pii.text import TextView, Unscannable

_CUSTOM_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def compile_patterns(custom_patterns: Sequence[CustomPattern]) -> tuple[tuple[str, regex.Pattern], ...]:
    """Compile tenant patterns to (entity type, pattern); raise InvalidPattern naming the first bad one."""
    compiled: dict[str, regex.Pattern] = {}
    for custom in custom_patterns:
        if not isinstance(custom.name, str) or not _CUSTOM_NAME.fullmatch(custom.name):
            raise InvalidPattern(str(custom.name), "a name is 1-64 letters, digits, '_', '.' or '-'")
        if CUSTOM_PREFIX + custom.name in compiled:
            raise InvalidPattern(custom.name, "duplicate name")
        compiled[CUSTOM_PREFIX + custom.name] = _compile_custom(custom)
    return tuple(compiled.items())


def patterns_from_policy(items: object) -> tuple[CustomPattern, ...]:
    """The tenant patterns a policy stores (``[{"name": ..., "regex": ...}]``), validated as the gateway
    compiles them: the one validation for saving a policy and for scanning with it. Raises InvalidPattern."""
    if not isinstance(items, list | tuple):
        raise InvalidPattern("", 'PII patterns are a list of {"name": ..., "regex": ...} objects')
    patterns = []
    for item in items:
        if not isinstance(item, dict) or set(item) != {"name", "regex"}:
            name = str(item.get("name", "")) if isinstance(item, dict) else ""
            raise InvalidPattern(name, 'each PII pattern is an object with exactly "name" and "regex"')
        if not isinstance(item["regex"], str):
            raise InvalidPattern(str(item["name"]), "the regex must be a string")
        patterns.append(CustomPattern(name=item["name"], regex=item["regex"]))
    compile_patterns(patterns)
    return tuple(patterns)


def _compile_custom(custom: CustomPattern) -> regex.Pattern:
    """A tenant PII pattern: `tenant_regex`, and it may not match the empty string."""
    pattern = tenant_regex(custom.regex, name=custom.name)
    if pattern.fullmatch(""):
        raise InvalidPattern(custom.name, "matches the empty string")
    return pattern


def tenant_regex(source: object, *, name: str = "", ignore_case: bool = False) -> regex.Pattern:
    """A tenant's regular expression, checked and compiled: parsed as a Python `re` pattern (the documented
    syntax, and a parser that does not expand counted repetitions), at most MAX_CUSTOM_PATTERN_LENGTH
    characters, repetitions written out at most MAX_CUSTOM_PATTERN_SIZE, then compiled by `regex`, the engine
    that runs it with a timeout (`tenant_regex_search`). Raises InvalidPattern naming `name`."""
    if not isinstance(source, str):
        raise InvalidPattern(name, "the pattern must be a string")
    if len(source) > MAX_CUSTOM_PATTERN_LENGTH:
        raise InvalidPattern(name, f"longer than {MAX_CUSTOM_PATTERN_LENGTH} characters")
    flags = re.IGNORECASE if ignore_case else 0
    try:
        parsed = _sre_parser.parse(source, flags)
    except (re.error, RecursionError, OverflowError) as error:
        raise InvalidPattern(name, str(error)) from error
    if _expanded_size(parsed) > MAX_CUSTOM_PATTERN_SIZE:
        raise InvalidPattern(name, "its repetitions are too large (keep counts such as {n} small)")
    try:
        return regex.compile(source, flags=regex.V0 | (regex.IGNORECASE if ignore_case else 0))
    except (regex.error, ValueError, OverflowError, RecursionError) as error:
        raise InvalidPattern(name, str(error)) from error


def tenant_regex_search(
    pattern: regex.Pattern, text: str, *, seconds: float, whole: bool = False
) -> regex.Match | None:
    """The first match of a tenant pattern in `text` (`whole`: the whole text), or None, spending at most
    `seconds` with the GIL released; past them raises TimeoutError (the pattern backtracks on this text,
    such as ``(a+)+$`` on "aaaa…!")."""
    if whole:
        return pattern.fullmatch(text, timeout=seconds, concurrent=True)
    return pattern.search(text, timeout=seconds, concurrent=True)


_REPEATS = (_sre_constants.MAX_REPEAT, _sre_constants.MIN_REPEAT, _sre_constants.POSSESSIVE_REPEAT)


def _expanded_size(items) -> int:
    """The size of a parsed pattern with its counted repetitions written out (``(?:a{1000}){1000}`` is a
    million): `regex` expands them when it compiles, in time and memory."""
    total = 0
    for operator, argument in items:
        if operator in _REPEATS:
            low, high, item = argument
            total += max(1, low if high == _sre_constants.MAXREPEAT else high) * _expanded_size(item)
        else:
            total += 1 + sum(_expanded_size(child) for child in _subpatterns(argument))
        if total > MAX_CUSTOM_PATTERN_SIZE:
            return total
    return total


def _subpatterns(argument) -> Iterator:
    if isinstance(argument, _sre_parser.SubPattern):
        yield argument
    elif isinstance(argument, list | tuple):
        for part in argument:
            yield from _subpatterns(part)


def custom_finder(pattern: regex.Pattern) -> Callable[[TextView], Iterator[Span]]:
    """Every match of a tenant pattern, within the time left to the scan call; the GIL is released while it
    matches, so a slow pattern does not stall the other threads (the gateway's event loop among them)."""

    def find(view: TextView) -> Iterator[Span]:
        try:
            spans = [
                match.span()
                for match in pattern.finditer(
                    view.text, timeout=view.budget.custom_seconds_left(), concurrent=True
                )
                if match.end() > match.start()
            ]
        except TimeoutError:
            raise Unscannable from None
        return iter(spans)

    return find
