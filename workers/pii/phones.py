"""Phone numbers: international ``+CC ...``, North American and trunk-prefix national numbers."""

from __future__ import annotations

import re
from collections.abc import Iterator

from workers.pii.base import Span
from workers.pii.text import TextView

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


def may_hold_phone(view: TextView) -> bool:
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


def find_phones(view: TextView) -> Iterator[Span]:
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
