"""Email addresses and IP addresses (IPv4 and IPv6)."""

from __future__ import annotations

import ipaddress
import re
import string
from collections.abc import Iterator

from workers.pii.base import Span
from workers.pii.text import HEX_CHARS, WORD_CHARS, TextView, char_after, char_before

# --- email ---------------------------------------------------------------------------------------------

_EMAIL_LOCAL_CHARS = frozenset(string.ascii_letters + string.digits + "._%+-")
_EMAIL_LOCAL_MAX = 64
_LAST_LATIN_LETTER = "\u024f"  # internationalized addresses in Latin scripts; CJK prose is not glued on
# Only where a label starts (no label character before it), possessive: linear on any text, where the same
# pattern without the look-behind read a long word to its end again from each of its characters.
_EMAIL_DOMAIN = re.compile(
    r"(?<![A-Za-z0-9\u00c0-\u024f-])[A-Za-z0-9\u00c0-\u024f-]++(?:\.[A-Za-z0-9\u00c0-\u024f-]++)+"
)


def find_emails(view: TextView) -> Iterator[Span]:
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


# --- IP addresses ---------------------------------------------------------------------------------------

IPV4 = re.compile(r"[0-9][0-9]{0,2}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}(?![0-9]|\.[0-9])")
_IPV4_NEIGHBOURS = WORD_CHARS | {"."}
_IPV6_ANCHOR = re.compile(r":[0-9A-Fa-f]{0,4}:")  # "::" or ":group:", in every address worth redacting
_IPV6_CANDIDATE = re.compile(r"[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,8}(?:\.[0-9]{1,3}){0,3}")
_IPV6_NEIGHBOURS = WORD_CHARS | {":", "."}
_IPV6_FULL_FORM_COLONS = 7


def may_hold_ipv4(view: TextView) -> bool:
    return view.digit_count >= 4 and b"0.0" in view.shape


def ipv4_span(text: str, match: re.Match[str]) -> Span | None:
    octets_valid = all(int(octet) <= 255 for octet in match.group().split("."))
    alone = (
        char_before(text, match.start()) not in _IPV4_NEIGHBOURS
        and char_after(text, match.end()) not in WORD_CHARS
    )  # a full stop may end the sentence
    return match.span() if octets_valid and alone else None


def may_hold_ipv6(view: TextView) -> bool:
    return "::" in view.text or view.text.count(":") >= _IPV6_FULL_FORM_COLONS


def find_ipv6(view: TextView) -> Iterator[Span]:
    text, position = view.text, 0
    while anchor := _IPV6_ANCHOR.search(text, position):
        span = _ipv6_starting_near(text, anchor.start())
        if span is _GLUED:
            # Every later anchor of this run of word characters, colons and dots starts glued as well (its
            # start cannot reach back past this one's): skip the run instead of trying each of its colons.
            run = _IPV6_NEIGHBOUR_RUN.match(text, anchor.start())
            assert run is not None  # the pattern matches the empty string
            position = run.end()
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
    while colon - start < 4 and char_before(text, start) in HEX_CHARS:
        start -= 1
    if char_before(text, start) in _IPV6_NEIGHBOURS:
        return _GLUED
    match = _IPV6_CANDIDATE.match(text, start)
    assert match is not None  # it matches: the anchor holds two colons
    candidate = match.group()
    if candidate.endswith(":") and not candidate.endswith("::"):
        candidate = candidate[:-1]
    end = start + len(candidate)
    if char_after(text, end) in WORD_CHARS:
        return None
    return (start, end) if _is_distinctive_ipv6(candidate) else None


def _is_distinctive_ipv6(candidate: str) -> bool:
    try:
        ipaddress.IPv6Address(candidate)
    except ValueError:
        return False
    groups = [group for group in candidate.split(":") if group]
    return len(groups) >= 2 and ("::" not in candidate or max(map(len, groups)) >= 3)
