"""Redaction of personal data and secrets in recorded gateway traffic.

The gateway runs every recorded request and response through a `Sanitizer` before anything is stored.
Each finding is replaced with ``[REDACTED:<type>]``. The types are stable strings (they are stored in
ATDP ``pii.entities`` and named in tenant policies):

``email``           local@domain.tld (ASCII or Latin letters; a TLD of two or more letters)
``phone``           international ``+CC ...`` (8-15 digits) and national numbers written with separators:
                    North American ``(415) 555-0123`` / ``415-555-0123`` / ``415.555.0123``, trunk-prefix
                    ``020 7946 0958``. Bare digit runs, years, prices, dates and times are not phones.
``credit_card``     13-19 digits, optionally grouped by spaces or dashes (4-4-4-4, 4-6-5, ...), first digit
                    2-6 (every major network; Unix timestamps and snowflake ids start with 1), Luhn-checked.
``iban``            country code, check digits and BBAN, spaces allowed, mod-97 checked (upper case only).
``ip_address``      IPv4 with octets up to 255 (not ``1.2.3`` or ``v1.2.3.4``) and IPv6, compressed forms
                    included; ``::``, ``::1`` and two-digit forms such as the slice ``[1::2]`` are left alone.
``api_key``         ``sk-`` (OpenAI, ``sk-proj-``, Anthropic ``sk-ant-``), ``ak-`` (areal-web keys), GitHub
                    ``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_``/``github_pat_``, Slack ``xox[abposr]-``. An
                    ``sk-``/``ak-`` key needs a digit or capital, so ``sk-learn-compatible-...`` is prose.
``aws_access_key``  access key ids (``AKIA``/``ASIA`` + 16) and secret access keys where labelled
                    (``aws_secret_access_key = ...``, ``"SecretAccessKey": "..."``, or a dict key so named);
                    only the secret value is replaced, the label stays.
``jwt``             three base64url segments (five for JWE) whose header decodes to JSON with ``alg``.
``private_key``     a whole ``-----BEGIN ... PRIVATE KEY-----`` block; a block cut off before its END line is
                    redacted to the end of the text.
``custom:<name>``   a tenant pattern (`CustomPattern`), most specific of all.

Where findings overlap, their union is redacted once under the most specific type (custom, private_key,
jwt, api_key, aws_access_key, iban, credit_card, email, ip_address, phone), so a card is not also a phone.
Text inside an existing placeholder is never matched again, and `Sanitizer.scan_text` repeats until nothing
new is found, so scanning redacted text finds nothing new.

Speed: every pattern is compiled at import (tenant patterns once per pattern set, see `sanitizer_for`).
Detectors anchored on a literal (``@``, ``sk-``, ``eyJ``, ``PRIVATE KEY``) start with ``str.find`` or
``in``; the digit detectors first look in a byte "shape" of the text (digits mapped to ``0``, letters to
``A``/``a``) for the separators they need, then run only inside numeric clusters found by one scan. Clean
prose costs a handful of substring searches; ``bench/sanitizer.py`` measures it.

Hostile input: every built-in detector runs in time linear in the text, whatever the text (no pattern can
backtrack over a long run once per position, a rejected candidate is never rescanned from far behind, a
number freed by the redaction of its neighbour is found in the same pass, so that chains of findings do not
cost one pass each); ``tests/gateway/test_sanitizer_limits.py`` feeds each detector 1 MiB built to defeat it.
One scan call (`Sanitizer.scan_text`, `scan_value`, `scan_messages`) is bounded by `ScanLimits`: at most
``max_chars`` characters (a string that does not fit in what is left is not scanned) and ``custom_seconds``
for the tenant patterns of all its strings together. The sanitizer fails closed: a string it could not scan
to the end (too large, a tenant pattern out of time, findings still appearing after `MAX_PASSES` passes) is
replaced whole by ``[REDACTED:unscanned]`` and the call lists the type ``unscanned``; callers that block on
findings refuse it like any other.

Tenant patterns: Python `re` syntax, validated by `compile_patterns` (or `patterns_from_policy` for the
JSON a policy stores; the policy service calls it before saving, the gateway before scanning): a name of
1-64 characters, at most 1000 characters of pattern, no pattern matching the empty string, none whose
repetitions expand past `MAX_CUSTOM_PATTERN_SIZE` (compiling ``(?:a{1000}){1000}`` alone takes seconds and
hundreds of MB). They run on the `regex` module, which releases the GIL while it matches and stops a match
at a timeout, so a catastrophic pattern such as ``(a+)+$`` costs at most the time left to the call.
"""

from __future__ import annotations

import base64
import copy
import functools
import ipaddress
import itertools
import json
import re
import re._constants as _sre_constants
import re._parser as _sre_parser
import string
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import regex

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


# --- shared helpers -------------------------------------------------------------------------------------

_WORD_CHARS = frozenset(string.ascii_letters + string.digits + "_")
_TOKEN_CHARS = _WORD_CHARS | {"-"}
_ALNUM_CHARS = frozenset(string.ascii_letters + string.digits)
_HEX_CHARS = frozenset(string.hexdigits)
_NUMERIC_CLUSTER = re.compile(r"[+(0-9][0-9 ().+-]{6,}")  # holds every phone, card and IPv4 address


def _build_shape_table() -> bytes:
    table = bytearray(range(256))
    for first, last, shape in (("0", "9", "0"), ("A", "Z", "A"), ("a", "z", "a")):
        for byte in range(ord(first), ord(last) + 1):
            table[byte] = ord(shape)
    return bytes(table)


_SHAPE_TABLE = _build_shape_table()


class _Unscannable(Exception):
    """A string cannot be scanned to the end within the call's limits; it is redacted whole."""


class _Budget:
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
            raise _Unscannable
        return left


class _TextView:
    """A text and what the detectors share about it, each computed on first use."""

    def __init__(self, text: str, budget: _Budget | None = None):
        self.text = text
        self.budget = budget or _Budget(ScanLimits())

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


def _char_before(text: str, index: int) -> str:
    return text[index - 1] if index > 0 else ""


def _char_after(text: str, index: int) -> str:
    return text[index] if index < len(text) else ""


def _stands_alone(text: str, span: Span, neighbours: frozenset[str]) -> bool:
    return _char_before(text, span[0]) not in neighbours and _char_after(text, span[1]) not in neighbours


Validator = Callable[[str, re.Match[str]], Span | None]


def _rechecked_matches(
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


def _checked_matches(pattern: re.Pattern[str], text: str, validate: Validator) -> Iterator[Span]:
    """Validated spans of non-overlapping matches, for tokens: a match that starts inside a rejected token
    is glued to it and would be rejected too, so the search resumes after the whole token."""
    for match in pattern.finditer(text):
        if span := validate(text, match):
            yield span


def _in_numeric_clusters(
    pattern: re.Pattern[str], validate: Validator, shortest: int
) -> Callable[[_TextView], Iterator[Span]]:
    def find(view: _TextView) -> Iterator[Span]:
        for start, end in view.numeric_clusters:
            if end - start >= shortest:  # one character past the cluster feeds the pattern's lookahead
                end_with_context = min(end + 1, len(view.text))
                yield from _rechecked_matches(pattern, view.text, validate, start, end_with_context)

    return find


# --- email ---------------------------------------------------------------------------------------------

_EMAIL_LOCAL_CHARS = frozenset(string.ascii_letters + string.digits + "._%+-")
_EMAIL_LOCAL_MAX = 64
_LAST_LATIN_LETTER = "\u024f"  # internationalized addresses in Latin scripts; CJK prose is not glued on
_EMAIL_DOMAIN = re.compile(r"[A-Za-z0-9\u00c0-\u024f-]+(?:\.[A-Za-z0-9\u00c0-\u024f-]+)+")


def _find_emails(view: _TextView) -> Iterator[Span]:
    """Anchored on each ``@``: a regex tried at every position would be quadratic on long words."""
    text = view.text
    at = text.find("@")
    while at != -1:
        start = _email_local_start(text, at)
        domain = _EMAIL_DOMAIN.match(text, at + 1)
        if start < at and domain and _has_top_level_domain(domain.group()):
            yield start, domain.end()
        at = text.find("@", domain.end() if domain else at + 1)


def _email_local_start(text: str, at: int) -> int:
    start = at
    while start > 0 and at - start < _EMAIL_LOCAL_MAX and _is_email_local_char(text[start - 1]):
        start -= 1
    return start


def _is_email_local_char(character: str) -> bool:
    return character in _EMAIL_LOCAL_CHARS or (character.isalpha() and character <= _LAST_LATIN_LETTER)


def _has_top_level_domain(domain: str) -> bool:
    top_level = domain.rsplit(".", 1)[1]
    return len(top_level) >= 2 and top_level.isalpha()


# --- phone ---------------------------------------------------------------------------------------------

_PHONE = re.compile(
    r"(?<![\w.+-])(?:"  # not glued to a word; a national number is not the tail of a longer digit sequence
    r"(?P<international>\+[1-9][0-9]{0,14}(?:[ .-]?\([0-9]{1,4}\)[ .-]?[0-9]{1,15})?(?:[ .-][0-9]{1,15}){0,14})"
    r"|(?<![0-9][ .-])(?P<north_american>(?:1[ .-])?(?:\([2-9][0-9]{2}\) ?|[2-9][0-9]{2}[ .-])"
    r"[2-9][0-9]{2}[ .-][0-9]{4})"
    r"|(?<![0-9][ .-])(?P<trunk>(?:0[0-9]{1,4}|\(0[0-9]{1,4}\))(?P<separator>[ .-])"
    r"[0-9]{2,8}(?:(?P=separator)[0-9]{2,8}){0,5})"
    r")(?![\w-]|\.[0-9])",
    re.ASCII,
)
_PHONE_DIGIT_RANGES = {"international": (8, 15), "north_american": (10, 11), "trunk": (9, 15)}
_PHONE_SEPARATED_DIGITS = (b"+0", b"0-00", b"0.00", b"0 00")  # every phone form contains one of these
_TRAILING_DIGIT_GROUP = re.compile(r"[ .-][0-9]+\Z")
# An international number holds at most 15 digits, so its pattern stops after 15 groups of at most 15 digits
# (past those it would be trimmed back anyway): no match is longer than this, and none is rescanned at length.
_PHONE_LONGEST_MATCH = 1 + 15 + (1 + 6 + 1 + 15) + 14 * 16
_PHONE_LOOKBEHIND = 2  # the widest look-behind of _PHONE


def _may_hold_phone(view: _TextView) -> bool:
    return view.digit_count >= 8 and any(marker in view.shape for marker in _PHONE_SEPARATED_DIGITS)


def _phone_span(text: str, match: re.Match[str]) -> Span | None:
    kind = next(name for name in _PHONE_DIGIT_RANGES if match.group(name))
    fewest, most = _PHONE_DIGIT_RANGES[kind]
    number = match.group()
    while (
        kind == "international"
        and _count_digits(number) > most
        and (trailing := _TRAILING_DIGIT_GROUP.search(number))
    ):
        number = number[: trailing.start()]
    if fewest <= _count_digits(number) <= most:
        return match.start(), match.start() + len(number)
    return None


def _count_digits(text: str) -> int:
    return sum(character.isdigit() for character in text)


def _find_phones(view: _TextView) -> Iterator[Span]:
    """Phones in each numeric cluster. A national number right after another finding is refused by the
    look-behind (it reads as the tail of a longer digit sequence) until that finding is redacted; rather than
    one more pass over the whole text per number of such a chain, the number is matched in the same pass as
    the redacted text will show it: after a placeholder's closing bracket."""
    text = view.text
    for cluster_start, cluster_end in view.numeric_clusters:
        if cluster_end - cluster_start < 8:
            continue
        end = min(cluster_end + 1, len(text))  # one character past the cluster feeds the look-ahead
        position, after_finding = cluster_start, False
        while position < end:
            if after_finding:
                span = _phone_after_finding(text, position, end)
                if span:
                    yield span
                    position = span[1]
                    continue
                position += _PHONE_LOOKBEHIND  # from here on the look-behind sees the text as it will be
                after_finding = False
            match = _PHONE.search(text, position, end)
            if not match:
                break
            span = _phone_span(text, match)
            if span:
                yield span
            position, after_finding = (span[1], True) if span else (match.start() + 1, False)


def _phone_after_finding(text: str, position: int, end: int) -> Span | None:
    """A phone starting at `position` or the character after it, read with a placeholder just before.

    Only where the match cannot depend on what follows it: a number whose groups could go on (a separator
    and a digit follow) may have been cut short by the look-ahead at a neighbour that this pass redacts too
    (``... 7946 0958-----BEGIN PRIVATE KEY``), so it is left to the next pass, which sees that neighbour
    redacted."""
    window_end = min(end, position + _PHONE_LONGEST_MATCH + _PHONE_LOOKBEHIND + 2)
    local = "]" + text[position:window_end]
    for offset in range(1, 1 + _PHONE_LOOKBEHIND):
        match = _PHONE.match(local, offset)
        if match:
            if not match.group("north_american") and _PHONE_GROUP_FOLLOWS.match(local, match.end()):
                return None
            if span := _phone_span(local, match):
                return span[0] + position - 1, span[1] + position - 1
    return None


_PHONE_GROUP_FOLLOWS = re.compile(r"[ .-][0-9]")


# --- credit card ----------------------------------------------------------------------------------------

_DIGIT_RUN = re.compile(r"[0-9](?:[ -]?[0-9]){12,}")
_DIGIT_GROUP = re.compile(r"[0-9]+")
_CARD_DIGITS = range(13, 20)
_CARD_MAX_GROUPS = 5


def _may_hold_card(view: _TextView) -> bool:
    return view.digit_count >= _CARD_DIGITS.start and b"0000" in view.shape


def _find_credit_cards(view: _TextView) -> Iterator[Span]:
    text = view.text
    for start, end in view.numeric_clusters:
        for run in _DIGIT_RUN.finditer(text, start, end):
            if _stands_alone(text, run.span(), _WORD_CHARS):  # not part of an id such as an IBAN or a hash
                groups = [group.span() for group in _DIGIT_GROUP.finditer(text, run.start(), run.end())]
                yield from _card_windows(text, groups)


def _card_windows(text: str, groups: list[Span]) -> Iterator[Span]:
    """Leftmost-longest windows of whole digit groups that look like a card and pass Luhn (a run may carry
    a leading count or a trailing security code). Group lengths, digit offsets and Luhn sums are computed
    once per run, so each window costs a few comparisons (a run may hold a million groups)."""
    run = _CardRun(text, groups)
    first = 0
    while first < len(groups):
        last = run.longest_window(first)
        if last is not None:
            yield groups[first][0], groups[last][1]
        first = first + 1 if last is None else last + 1


_LUHN_DOUBLED = (0, 2, 4, 6, 8, 1, 3, 5, 7, 9)  # digit * 2 with its two digits summed


class _CardRun:
    def __init__(self, text: str, groups: list[Span]):
        self.text, self.groups = text, groups
        self.lengths = [end - start for start, end in groups]
        self.offsets = list(itertools.accumulate(self.lengths, initial=0))  # digit offset of each group
        self.separators = [text[end] if end < len(text) else "" for _, end in groups]  # after each group

    @functools.cached_property
    def sums(self) -> tuple[list[int], list[int]]:
        """Luhn keeps the last digit, doubles the one before, and so on: the sum of a window comes from two
        prefix sums, one for windows ending on an even digit offset and one for those ending on an odd one."""
        digits = list(map(int, "".join(self.text[start:end] for start, end in self.groups)))
        doubled = [_LUHN_DOUBLED[digit] for digit in digits]
        kept_on_even, kept_on_odd = digits[:], doubled[:]
        kept_on_even[1::2], kept_on_odd[1::2] = doubled[1::2], digits[1::2]
        return (
            list(itertools.accumulate(kept_on_even, initial=0)),
            list(itertools.accumulate(kept_on_odd, initial=0)),
        )

    def longest_window(self, first: int) -> int | None:
        """The last group of the longest card-shaped window from `first` that passes Luhn: one block of
        13-19 digits, or 4 digits then groups of 4-6 (the last may be shorter) split by one kind of
        separator; every major network's numbers start with 2-6."""
        lengths, offsets = self.lengths, self.offsets
        first_length = lengths[first]
        if self.text[self.groups[first][0]] not in "23456" or (
            first_length != 4 and first_length not in _CARD_DIGITS
        ):
            return None
        for last in range(min(len(self.groups), first + _CARD_MAX_GROUPS) - 1, first - 1, -1):
            if offsets[last + 1] - offsets[first] not in _CARD_DIGITS:
                continue
            if last > first:
                middle = lengths[first + 1 : last] or [4]
                if (
                    first_length != 4
                    or lengths[last] > 6
                    or min(middle) < 4
                    or max(middle) > 6
                    or len(set(self.separators[first:last])) != 1
                ):
                    continue
            if self._passes_luhn(first, last):
                return last
        return None

    def _passes_luhn(self, first: int, last: int) -> bool:
        start, end = self.offsets[first], self.offsets[last + 1]
        sums = self.sums[(end - 1) % 2]
        return (sums[end] - sums[start]) % 10 == 0


# --- IBAN -----------------------------------------------------------------------------------------------

_IBAN = re.compile(r"[A-Z][A-Z][0-9]{2}(?: ?[A-Z0-9]){11,30}")
_IBAN_LENGTHS = {
    "AD": 24,
    "AE": 23,
    "AL": 28,
    "AT": 20,
    "AZ": 28,
    "BA": 20,
    "BE": 16,
    "BG": 22,
    "BH": 22,
    "BI": 27,
    "BR": 29,
    "BY": 28,
    "CH": 21,
    "CR": 22,
    "CY": 28,
    "CZ": 24,
    "DE": 22,
    "DJ": 27,
    "DK": 18,
    "DO": 28,
    "EE": 20,
    "EG": 29,
    "ES": 24,
    "FI": 18,
    "FK": 18,
    "FO": 18,
    "FR": 27,
    "GB": 22,
    "GE": 22,
    "GI": 23,
    "GL": 18,
    "GR": 27,
    "GT": 28,
    "HN": 28,
    "HR": 21,
    "HU": 28,
    "IE": 22,
    "IL": 23,
    "IQ": 23,
    "IS": 26,
    "IT": 27,
    "JO": 30,
    "KW": 30,
    "KZ": 20,
    "LB": 28,
    "LC": 32,
    "LI": 21,
    "LT": 20,
    "LU": 20,
    "LV": 21,
    "LY": 25,
    "MC": 27,
    "MD": 24,
    "ME": 22,
    "MK": 19,
    "MN": 20,
    "MR": 27,
    "MT": 31,
    "MU": 30,
    "NI": 28,
    "NL": 18,
    "NO": 15,
    "OM": 23,
    "PK": 24,
    "PL": 28,
    "PS": 29,
    "PT": 25,
    "QA": 29,
    "RO": 24,
    "RS": 22,
    "RU": 33,
    "SA": 24,
    "SC": 31,
    "SD": 18,
    "SE": 24,
    "SI": 19,
    "SK": 24,
    "SM": 27,
    "SO": 23,
    "ST": 25,
    "SV": 28,
    "TL": 23,
    "TN": 24,
    "TR": 26,
    "UA": 29,
    "VA": 22,
    "VG": 24,
    "XK": 20,
    "YE": 30,
}
_IBAN_MIN_LENGTH = 15


def _may_hold_iban(view: _TextView) -> bool:
    return view.digit_count >= 2 and b"AA00" in view.shape


def _iban_span(text: str, match: re.Match[str]) -> Span | None:
    """The pattern may swallow upper-case words after the IBAN, so each group boundary is a candidate end:
    the country's registered length first, then the longest. A candidate is tried at every word start of a
    long run of groups, so this walks the groups once and converts only the candidates to numbers."""
    start = match.start()
    if start and text[start - 1] in _ALNUM_CHARS:
        return None
    body = match.group()
    registered = _IBAN_LENGTHS.get(body[:2])
    size, length, end, bban, candidates = len(text), 4, start + 4, "", []
    for index, part in enumerate(body[4:].split(" ")):
        end += len(part) + (index > 0)
        length += len(part)
        bban += part
        if length >= _IBAN_MIN_LENGTH and (end >= size or text[end] not in _ALNUM_CHARS):
            candidates.append((length != registered, -length, end, bban))
    if candidates:
        head = body[:4].translate(_IBAN_DIGIT_TABLE)  # country and check digits go behind the BBAN
        for _, _, candidate_end, candidate in sorted(candidates):
            if int(candidate.translate(_IBAN_DIGIT_TABLE) + head) % 97 == 1:
                return start, candidate_end
    return None


_IBAN_DIGIT_TABLE = str.maketrans(
    {letter: str(value) for value, letter in enumerate(string.ascii_uppercase, 10)}
)


# --- IP addresses ---------------------------------------------------------------------------------------

_IPV4 = re.compile(r"[0-9][0-9]{0,2}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}(?![0-9]|\.[0-9])")
_IPV4_NEIGHBOURS = _WORD_CHARS | {"."}
_IPV6_ANCHOR = re.compile(r":[0-9A-Fa-f]{0,4}:")  # "::" or ":group:", in every address worth redacting
_IPV6_CANDIDATE = re.compile(r"[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,8}(?:\.[0-9]{1,3}){0,3}")
_IPV6_NEIGHBOURS = _WORD_CHARS | {":", "."}
_IPV6_FULL_FORM_COLONS = 7


def _may_hold_ipv4(view: _TextView) -> bool:
    return view.digit_count >= 4 and b"0.0" in view.shape


def _ipv4_span(text: str, match: re.Match[str]) -> Span | None:
    octets_valid = all(int(octet) <= 255 for octet in match.group().split("."))
    alone = (
        _char_before(text, match.start()) not in _IPV4_NEIGHBOURS
        and _char_after(text, match.end()) not in _WORD_CHARS
    )  # a full stop may end the sentence
    return match.span() if octets_valid and alone else None


def _may_hold_ipv6(view: _TextView) -> bool:
    return "::" in view.text or view.text.count(":") >= _IPV6_FULL_FORM_COLONS


def _find_ipv6(view: _TextView) -> Iterator[Span]:
    text, position = view.text, 0
    while anchor := _IPV6_ANCHOR.search(text, position):
        span = _ipv6_starting_near(text, anchor.start())
        if span is _GLUED:
            # Every later anchor of this run of word characters, colons and dots starts glued as well (its
            # start cannot reach back past this one's): skip the run instead of trying each of its colons.
            position = _IPV6_NEIGHBOUR_RUN.match(text, anchor.start()).end()
        elif span:
            yield span
            position = span[1]
        else:
            position = anchor.start() + 1


_GLUED = (-1, -1)
_IPV6_NEIGHBOUR_RUN = re.compile(r"[A-Za-z0-9_:.]*")  # _IPV6_NEIGHBOURS


def _ipv6_starting_near(text: str, colon: int) -> Span | None:
    """An address starts at most four hex digits before its first colon; `_GLUED` when that start follows a
    word character, colon or dot."""
    start = colon
    while colon - start < 4 and _char_before(text, start) in _HEX_CHARS:
        start -= 1
    if _char_before(text, start) in _IPV6_NEIGHBOURS:
        return _GLUED
    candidate = _IPV6_CANDIDATE.match(text, start).group()  # matches: the anchor holds two colons
    if candidate.endswith(":") and not candidate.endswith("::"):
        candidate = candidate[:-1]
    end = start + len(candidate)
    if _char_after(text, end) in _WORD_CHARS:
        return None
    return (start, end) if _is_distinctive_ipv6(candidate) else None


def _is_distinctive_ipv6(candidate: str) -> bool:
    try:
        ipaddress.IPv6Address(candidate)
    except ValueError:
        return False
    groups = [group for group in candidate.split(":") if group]
    return len(groups) >= 2 and ("::" not in candidate or max(map(len, groups)) >= 3)


# --- keys and tokens ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _KeyFormat:
    separator: str  # one character, found by memchr, before the slower search for the markers
    markers: tuple[str, ...]
    pattern: re.Pattern[str]
    needs_mixed_characters: bool  # "sk-learn-compatible-estimators" is prose, a random key is not


_API_KEY_FORMATS = (
    _KeyFormat("-", ("sk-",), re.compile(r"sk-[A-Za-z0-9_-]{20,}"), True),
    _KeyFormat("-", ("ak-",), re.compile(r"ak-[A-Za-z0-9_-]{20,}"), True),
    _KeyFormat(
        "_", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), re.compile(r"gh[pousr]_[A-Za-z0-9]{30,}"), False
    ),
    _KeyFormat("_", ("github_pat_",), re.compile(r"github_pat_[A-Za-z0-9_]{30,}"), False),
    _KeyFormat("-", ("xox",), re.compile(r"xox[abposr]-[A-Za-z0-9-]{10,}"), False),
)


def _find_api_keys(view: _TextView) -> Iterator[Span]:
    for key_format in _API_KEY_FORMATS:
        if key_format.separator in view.text and any(marker in view.text for marker in key_format.markers):
            validate = functools.partial(_api_key_span, key_format)
            yield from _checked_matches(key_format.pattern, view.text, validate)


def _api_key_span(key_format: _KeyFormat, text: str, match: re.Match[str]) -> Span | None:
    if _char_before(text, match.start()) in _TOKEN_CHARS:
        return None
    body = match.group()[len(key_format.markers[0]) :]
    if key_format.needs_mixed_characters and not any(c.isdigit() or c.isupper() for c in body):
        return None
    return match.span()


_AWS_ACCESS_KEY_ID = re.compile(r"A[KS]IA[A-Z0-9]{16}(?![A-Za-z0-9])")
_AWS_SECRET_LABEL = r"(?:aws[_ .-]?secret[_ .-]?(?:access[_ .-]?)?key|secret[_ .-]?access[_ .-]?key)"
_AWS_LABELLED_SECRET = re.compile(
    _AWS_SECRET_LABEL + r"""["']?\s*[:=]\s*["']?([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])""", re.IGNORECASE
)
_AWS_SECRET_KEY_NAME = re.compile(_AWS_SECRET_LABEL, re.IGNORECASE)
_AWS_SECRET_VALUE = re.compile(r"[A-Za-z0-9/+]{40}")


def _find_aws_keys(view: _TextView) -> Iterator[Span]:
    text = view.text
    if "AKIA" in text or "ASIA" in text:
        for match in _AWS_ACCESS_KEY_ID.finditer(text):
            if _char_before(text, match.start()) not in _ALNUM_CHARS:
                yield match.span()
    if "ecret" in text or "ECRET" in text:
        for match in _AWS_LABELLED_SECRET.finditer(text):
            yield match.span(1)


def _is_labelled_aws_secret(key: object, value: object) -> bool:
    return (
        isinstance(key, str)
        and isinstance(value, str)
        and bool(_AWS_SECRET_KEY_NAME.fullmatch(key))
        and bool(_AWS_SECRET_VALUE.fullmatch(value))
    )


_JWT = re.compile(  # header.payload.signature, or the five segments of a JWE
    # Only where a token starts: tried inside a run such as "eyJeyJeyJ..." the pattern would swallow the
    # rest of the run from every "eyJ" and give it back (quadratic); a match there is refused anyway.
    r"(?<![A-Za-z0-9_.-])eyJ[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*)?"
)
_JWT_NEIGHBOURS = _TOKEN_CHARS | {"."}


def _jwt_span(text: str, match: re.Match[str]) -> Span | None:
    if _char_before(text, match.start()) in _JWT_NEIGHBOURS:
        return None
    return match.span() if _header_names_algorithm(match.group().split(".", 1)[0]) else None


def _header_names_algorithm(segment: str) -> bool:
    try:
        header = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    except ValueError:  # binascii.Error, UnicodeDecodeError and JSONDecodeError all are
        return False
    return isinstance(header, dict) and "alg" in header


_PRIVATE_KEY_BLOCK = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?"
    r"(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    re.DOTALL,
)


def _find_private_keys(view: _TextView) -> Iterator[Span]:
    return (match.span() for match in _PRIVATE_KEY_BLOCK.finditer(view.text))


# --- detectors ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Detector:
    entity: str
    might_occur: Callable[[_TextView], bool]  # cheap, and never wrong when it says no
    find_spans: Callable[[_TextView], Iterator[Span]]

    @property
    def rank(self) -> int:
        return -1 if self.entity.startswith(CUSTOM_PREFIX) else SPECIFICITY.index(self.entity)


def _always(view: _TextView) -> bool:
    return True


def _containing(marker: str) -> Callable[[_TextView], bool]:
    return lambda view: marker in view.text


def _searching(pattern: re.Pattern[str], validate: Validator) -> Callable[[_TextView], Iterator[Span]]:
    return lambda view: _rechecked_matches(pattern, view.text, validate)


_BUILTIN_DETECTORS = (
    _Detector("private_key", _containing("PRIVATE KEY"), _find_private_keys),
    _Detector("jwt", _containing("eyJ"), lambda view: _checked_matches(_JWT, view.text, _jwt_span)),
    _Detector("api_key", _always, _find_api_keys),
    _Detector("aws_access_key", _always, _find_aws_keys),
    _Detector("iban", _may_hold_iban, _searching(_IBAN, _iban_span)),
    _Detector("credit_card", _may_hold_card, _find_credit_cards),
    _Detector("email", _containing("@"), _find_emails),
    _Detector("ip_address", _may_hold_ipv4, _in_numeric_clusters(_IPV4, _ipv4_span, shortest=7)),
    _Detector("ip_address", _may_hold_ipv6, _find_ipv6),
    _Detector("phone", _may_hold_phone, _find_phones),
)

_PLACEHOLDER = re.compile(r"\[REDACTED:[A-Za-z0-9_.:-]+\]")
_CUSTOM_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_SHORTEST_BUILTIN_FINDING = 6  # "a@b.co"


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
    """Parsed as a Python `re` pattern (the documented syntax, and a parser that does not expand counted
    repetitions), then compiled by `regex`, the engine that runs it with a timeout."""
    if len(custom.regex) > MAX_CUSTOM_PATTERN_LENGTH:
        raise InvalidPattern(custom.name, f"longer than {MAX_CUSTOM_PATTERN_LENGTH} characters")
    try:
        parsed = _sre_parser.parse(custom.regex)
    except (re.error, RecursionError, OverflowError) as error:
        raise InvalidPattern(custom.name, str(error)) from error
    if _expanded_size(parsed) > MAX_CUSTOM_PATTERN_SIZE:
        raise InvalidPattern(custom.name, "its repetitions are too large (keep counts such as {n} small)")
    try:
        pattern = regex.compile(custom.regex, flags=regex.V0)
    except (regex.error, ValueError, OverflowError, RecursionError) as error:
        raise InvalidPattern(custom.name, str(error)) from error
    if pattern.fullmatch(""):
        raise InvalidPattern(custom.name, "matches the empty string")
    return pattern


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


def _custom_finder(pattern: regex.Pattern) -> Callable[[_TextView], Iterator[Span]]:
    """Every match of a tenant pattern, within the time left to the scan call; the GIL is released while it
    matches, so a slow pattern does not stall the other threads (the gateway's event loop among them)."""

    def find(view: _TextView) -> Iterator[Span]:
        try:
            spans = [
                match.span()
                for match in pattern.finditer(
                    view.text, timeout=view.budget.custom_seconds_left(), concurrent=True
                )
                if match.end() > match.start()
            ]
        except TimeoutError:
            raise _Unscannable from None
        return iter(spans)

    return find


# --- the sanitizer --------------------------------------------------------------------------------------

_STRUCTURAL_MESSAGE_KEYS = frozenset({"role", "type", "id", "tool_call_id", "tool_use_id"})
_OPAQUE_MESSAGE_KEYS = frozenset({"signature", "image_url", "input_audio", "file"})  # base64 and URLs
_JSON_OPENERS = ("{", "[")
_SMALLEST_CARD_INTEGER = 10 ** (_CARD_DIGITS.start - 1)


class Sanitizer:
    """Finds and redacts personal data and secrets; immutable after construction, safe to share between
    threads. Each scan call gets a fresh budget of `ScanLimits`."""

    def __init__(self, custom_patterns: Sequence[CustomPattern] = (), *, limits: ScanLimits = ScanLimits()):
        self._custom_detectors = tuple(
            _Detector(entity, _always, _custom_finder(pattern))
            for entity, pattern in compile_patterns(custom_patterns)
        )
        self._detectors = self._custom_detectors + _BUILTIN_DETECTORS
        self.limits = limits

    def scan_text(self, text: str) -> SanitizeResult:
        """Redact until nothing new is found: a redaction can free a neighbour that was rejected as glued
        to it (``a@b.coma@b.com``), so the result is a fixed point and a second scan finds nothing."""
        found: set[str] = set()
        text = self._scan_text(text, found, _Budget(self.limits))
        return SanitizeResult(text, tuple(sorted(found)))

    def scan_value(self, value: object) -> tuple[object, tuple[str, ...]]:
        """Any JSON-like value: strings, dict keys and values, list items, card-sized integers."""
        found: set[str] = set()
        try:
            return self._walk(value, found, _Budget(self.limits), in_messages=False), tuple(sorted(found))
        except RecursionError:  # nested deeper than can be walked: nothing of it is kept
            return PLACEHOLDER_TEMPLATE.format(entity=UNSCANNED), (UNSCANNED,)

    def scan_messages(self, messages: list[dict]) -> tuple[list[dict], tuple[str, ...]]:
        """OpenAI and Anthropic chat messages: a redacted deep copy. Text, content parts, tool call arguments
        (kept valid JSON), tool_use inputs and tool_result contents are scanned; roles, types, ids,
        thinking signatures and binary parts (images, audio, files, base64 sources) are kept as they are."""
        found: set[str] = set()
        budget = _Budget(self.limits)
        return [self._walk(message, found, budget, in_messages=True) for message in messages], tuple(
            sorted(found)
        )

    def _scan_text(self, text: str, found: set[str], budget: _Budget) -> str:
        """The redacted text, or the unscanned placeholder when the budget does not cover it."""
        entities: set[str] = set()
        try:
            if not budget.take(len(text)):
                raise _Unscannable
            findings = self._findings(text, budget)
            for _ in range(MAX_PASSES):
                if not findings:
                    found.update(entities)
                    return text
                text = _redact(text, findings, entities)
                findings = self._findings(text, budget)
            raise _Unscannable  # still finding after every pass: give up on this string, not on safety
        except _Unscannable:
            found.add(UNSCANNED)
            return PLACEHOLDER_TEMPLATE.format(entity=UNSCANNED)

    def _findings(self, text: str, budget: _Budget) -> list[Finding]:
        if len(text) < _SHORTEST_BUILTIN_FINDING and not self._custom_detectors:
            return []
        view = _TextView(text, budget)
        findings = [
            (start, end, detector.rank, detector.entity)
            for detector in self._detectors
            if detector.might_occur(view)
            for start, end in detector.find_spans(view)
        ]
        if findings and "[REDACTED:" in text:
            findings = _outside_placeholders(text, findings)
        return findings

    def _walk(self, value: object, found: set[str], budget: _Budget, in_messages: bool) -> object:
        if isinstance(value, str):
            return self._scan_string(value, found, budget, in_messages)
        if isinstance(value, dict):
            return self._walk_dict(value, found, budget, in_messages)
        if isinstance(value, list | tuple):
            return [self._walk(item, found, budget, in_messages) for item in value]
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= _SMALLEST_CARD_INTEGER:
            return self._scan_integer(value, found, budget)
        return copy.deepcopy(value)

    def _walk_dict(self, value: dict, found: set[str], budget: _Budget, in_messages: bool) -> dict:
        walked = {}
        for key, item in value.items():
            if in_messages and _is_kept_as_is(key, item):
                walked[key] = copy.deepcopy(item)
            elif _is_labelled_aws_secret(key, item):
                walked[key] = PLACEHOLDER_TEMPLATE.format(entity="aws_access_key")
                found.add("aws_access_key")
            else:
                walked[self._walk_key(key, found, budget)] = self._walk(item, found, budget, in_messages)
        return walked

    def _walk_key(self, key: object, found: set[str], budget: _Budget) -> object:
        """Field names such as ``tool_calls`` hold nothing a built-in detector finds; other keys are
        scanned, since ids and addresses do appear as keys."""
        is_field_name = isinstance(key, str) and key.isascii() and key.replace("_", "").isalpha()
        if is_field_name and not self._custom_detectors:
            return key
        return self._walk(key, found, budget, in_messages=False)

    def _scan_string(self, value: str, found: set[str], budget: _Budget, in_messages: bool) -> str:
        if _looks_like_json(value) and len(value) <= budget.chars_left:
            redacted_json = self._scan_json_string(value, found, budget, in_messages)
            if redacted_json is not None:
                return redacted_json
        return self._scan_text(value, found, budget)

    def _scan_json_string(
        self, value: str, found: set[str], budget: _Budget, in_messages: bool
    ) -> str | None:
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

    def _scan_integer(self, value: int, found: set[str], budget: _Budget) -> object:
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


def sanitizer_for(custom_patterns: Sequence[CustomPattern], limits: ScanLimits = ScanLimits()) -> Sanitizer:
    """The shared Sanitizer for a tenant's pattern set, compiled once (the gateway calls this per request)."""
    return _cached_sanitizer(tuple(custom_patterns), limits)


@functools.lru_cache(maxsize=256)
def _cached_sanitizer(custom_patterns: tuple[CustomPattern, ...], limits: ScanLimits) -> Sanitizer:
    return Sanitizer(custom_patterns, limits=limits)
