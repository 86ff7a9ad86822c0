"""Payment card numbers (Luhn-checked) and IBANs (mod-97 checked)."""

from __future__ import annotations

import functools
import itertools
import re
import string
from collections.abc import Iterator

from workers.pii.base import Span
from workers.pii.text import ALNUM_CHARS, WORD_CHARS, TextView, stands_alone

# --- credit card ----------------------------------------------------------------------------------------

_DIGIT_RUN = re.compile(r"[0-9](?:[ -]?[0-9]){12,}")
_DIGIT_GROUP = re.compile(r"[0-9]+")
CARD_DIGITS = range(13, 20)
_CARD_MAX_GROUPS = 5


def may_hold_card(view: TextView) -> bool:
    return view.digit_count >= CARD_DIGITS.start and b"0000" in view.shape


def find_credit_cards(view: TextView) -> Iterator[Span]:
    text = view.text
    for start, end in view.numeric_clusters:
        for run in _DIGIT_RUN.finditer(text, start, end):
            if stands_alone(text, run.span(), WORD_CHARS):  # not part of an id such as an IBAN or a hash
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
            first_length != 4 and first_length not in CARD_DIGITS
        ):
            return None
        for last in range(min(len(self.groups), first + _CARD_MAX_GROUPS) - 1, first - 1, -1):
            if offsets[last + 1] - offsets[first] not in CARD_DIGITS:
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

IBAN = re.compile(r"[A-Z][A-Z][0-9]{2}(?: ?[A-Z0-9]){11,30}")
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


def may_hold_iban(view: TextView) -> bool:
    return view.digit_count >= 2 and b"AA00" in view.shape


def iban_span(text: str, match: re.Match[str]) -> Span | None:
    """An IBAN's country must be registered and its length is the country's registered length (ISO 13616),
    so the pattern, which may swallow upper-case words after it, has one candidate end: the group boundary
    where that length is reached, not followed by a letter or digit."""
    start = match.start()
    if start and text[start - 1] in ALNUM_CHARS:
        return None
    body = match.group()
    registered = _IBAN_LENGTHS.get(body[:2])
    if registered is None:
        return None
    length, end = 4, start + 4
    for index, part in enumerate(body[4:].split(" ")):
        end += len(part) + (index > 0)
        length += len(part)
        if length >= registered:
            break
    if length != registered or (end < len(text) and text[end] in ALNUM_CHARS):
        return None
    bban = text[start + 4 : end].replace(" ", "")
    checked = (bban + body[:4]).translate(_IBAN_DIGIT_TABLE)  # country and check digits go behind the BBAN
    return (start, end) if int(checked) % 97 == 1 else None


_IBAN_DIGIT_TABLE = str.maketrans(
    {letter: str(value) for value, letter in enumerate(string.ascii_uppercase, 10)}
)
