"""The gateway's JSON on its request path: orjson, with the standard library behind it for what orjson refuses.

`loads` reads a backend's answer (and the recorder a journal line): orjson first; a document orjson refuses (the NaN and Infinity a backend's
logprobs can hold, a number too large for a double, a lone surrogate) goes through `json.loads`, and its
non-finite numbers become `NonFinite`, a float that `dumps` writes back as the same token. orjson reads an
integer past 64 bits as a float where json.loads keeps it exact: the client's request, which may carry one, is
read by the standard library (`Gateway.read_json`, with `parse_constant` below).

`dumps` writes compact JSON as UTF-8 bytes (non-ASCII text as itself, where json.dumps writes \\u escapes):
orjson, `NonFinite` as its token, another float that is not finite as null (json.dumps would write a token
that is not JSON, which PostgreSQL's jsonb refuses), other types through `str` (as `default=str` did); what
orjson cannot encode (an integer past 64 bits, a lone surrogate) through json.dumps. Measured
(bench/gateway/README.md, 2026-12-07): json was about 8 % of the web process's CPU at 32 connections before.
"""

import json
import math

import orjson

# datetimes and dataclasses through `default` (str), as json.dumps(default=str) wrote them
_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


class NonFinite(float):
    """A NaN or an infinity read from a document, written back by `dumps` as the token it was read from."""

    def token(self) -> bytes:
        if math.isnan(self):
            return b"NaN"
        return b"Infinity" if self > 0 else b"-Infinity"


def parse_constant(name: str) -> NonFinite:
    """json.loads' `parse_constant`: NaN and Infinity read as NonFinite (for a document read with the standard
    library, a client's request body, whose tokens `dumps` should keep)."""
    return NonFinite(float(name))


def _mark_non_finite(value):
    """`value` with every float that is not finite (1e400 reads as one) as a NonFinite."""
    if isinstance(value, float) and not isinstance(value, NonFinite) and not math.isfinite(value):
        return NonFinite(value)
    if isinstance(value, dict):
        return {key: _mark_non_finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_mark_non_finite(item) for item in value]
    return value


def loads(raw: bytes | str):
    """The JSON value of `raw`; ValueError (json.JSONDecodeError) when it is not JSON, as json.loads."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _mark_non_finite(json.loads(raw, parse_constant=parse_constant))


def _default(value):
    if isinstance(value, NonFinite):
        return orjson.Fragment(value.token())
    return str(value)


def dumps(value) -> bytes:
    """Compact JSON of `value` as UTF-8 bytes."""
    try:
        return orjson.dumps(value, default=_default, option=_OPTIONS)
    except TypeError:  # an integer past 64 bits or a lone surrogate: the standard library's output
        return json.dumps(value, separators=(",", ":"), default=str).encode("utf-8", "surrogatepass")
