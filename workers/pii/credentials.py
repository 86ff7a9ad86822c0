"""Secrets: API keys, AWS access keys and labelled secret keys, JWTs, private key blocks."""

from __future__ import annotations

import base64
import functools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

from workers.pii.base import Span
from workers.pii.text import ALNUM_CHARS, TOKEN_CHARS, TextView, char_before, checked_matches


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


def find_api_keys(view: TextView) -> Iterator[Span]:
    for key_format in _API_KEY_FORMATS:
        if key_format.separator in view.text and any(marker in view.text for marker in key_format.markers):
            validate = functools.partial(_api_key_span, key_format)
            yield from checked_matches(key_format.pattern, view.text, validate)


def _api_key_span(key_format: _KeyFormat, text: str, match: re.Match[str]) -> Span | None:
    if char_before(text, match.start()) in TOKEN_CHARS:
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


def find_aws_keys(view: TextView) -> Iterator[Span]:
    text = view.text
    if "AKIA" in text or "ASIA" in text:
        for match in _AWS_ACCESS_KEY_ID.finditer(text):
            if char_before(text, match.start()) not in ALNUM_CHARS:
                yield match.span()
    if "ecret" in text or "ECRET" in text:
        for match in _AWS_LABELLED_SECRET.finditer(text):
            yield match.span(1)


def is_labelled_aws_secret(key: object, value: object) -> bool:
    return (
        isinstance(key, str)
        and isinstance(value, str)
        and bool(_AWS_SECRET_KEY_NAME.fullmatch(key))
        and bool(_AWS_SECRET_VALUE.fullmatch(value))
    )


JWT = re.compile(  # header.payload.signature, or the five segments of a JWE
    # Only where a token starts: tried inside a run such as "eyJeyJeyJ..." the pattern would swallow the
    # rest of the run from every "eyJ" and give it back (quadratic); a match there is refused anyway.
    r"(?<![A-Za-z0-9_.-])eyJ[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*)?"
)
_JWT_NEIGHBOURS = TOKEN_CHARS | {"."}


def jwt_span(text: str, match: re.Match[str]) -> Span | None:
    if char_before(text, match.start()) in _JWT_NEIGHBOURS:
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


def find_private_keys(view: TextView) -> Iterator[Span]:
    return (match.span() for match in _PRIVATE_KEY_BLOCK.finditer(view.text))
