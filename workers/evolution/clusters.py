"""Tool failures grouped so that a person (or a harness proposer) sees one row per distinct problem: the tool,
whether its result reported an error or the call itself was malformed, the error's signature (its text with
the particulars taken out) and the shape of the arguments that led to it."""

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

FAILED_RESULT = "failed_result"
MALFORMED_CALL = "malformed_call"
MALFORMED_SIGNATURE = "arguments are not a JSON object"
INVALID_JSON = "<invalid json>"
SIGNATURE_CHARS = 200
SHAPE_CHARS = 300
SHAPE_KEYS = 8  # named keys of a shape at most (the others are counted)
SHAPE_KEY_CHARS = 24
_SHAPE_TYPES = ("bool", "num", "str", "null", "list", "obj")
MAX_EXAMPLES = 10
MAX_EXAMPLE_ARGUMENTS = 5
# What the patterns see: a line or an error message is cut to this many characters first (a tool result can be
# megabytes; the signature keeps SIGNATURE_CHARS), and at most this many argument values, each at most this
# long, are taken out of it.
MAX_TEXT_CHARS = 16_384
MAX_PARTICULARS = 32
MAX_PARTICULAR_CHARS = 1_024

_FAILURE_START = re.compile(
    r"^\s*(error|errors|exception|traceback|failed|failure|fatal|could not|cannot|unable to)\b", re.IGNORECASE
)
_QUOTE = re.compile(r"[\"']")
# The inside of a quoted string, possessive: its pieces never take the closing quote, so giving one back
# could never let the quote match.
_QUOTED_BODY = {'"': re.compile(r'(?:[^"\\]|\\.)*+'), "'": re.compile(r"(?:[^'\\]|\\.)*+")}
_NUMBER = re.compile(r"(?<![A-Za-z_])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class ToolEvent:
    """One tool call as clustering sees it: its arguments (the raw string the model wrote), the text of its
    result (None: no result seen), when, and whether the call was malformed (arguments not a JSON object)."""

    trajectory_id: str
    tool: str
    arguments: str
    result_text: str | None
    at: datetime
    malformed: bool = False


@dataclass(frozen=True)
class Cluster:
    tool: str
    kind: str
    signature: str
    argument_shape: str
    count: int
    first_seen: datetime
    last_seen: datetime
    examples: list[str] = field(default_factory=list)  # trajectory ids, newest last
    example_arguments: list[str] = field(default_factory=list)  # newest last

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.tool, self.kind, self.signature, self.argument_shape)


def _without_quoted(text: str) -> str:
    """Each quoted string ("..." or '...', backslash escapes inside) → '<s>', in linear time. The same as
    substituting the pattern ``"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'``, which is quadratic: tried from every
    quote, it reads to the end of the text each time no closing quote follows. Here a quote that found no
    closing one records where its reading stopped: every later quote of its kind before that point was read
    as an escaped character, would read the same rest, and fails the same way, so it is not read again."""
    parts = []
    copied = 0  # text[:copied] is in parts
    unclosed = {'"': -1, "'": -1}  # a quote of this kind before this position has no closing quote
    found = _QUOTE.search(text)
    while found is not None:
        start, quote = found.start(), found.group()
        if start >= unclosed[quote]:
            body = _QUOTED_BODY[quote].match(text, start + 1)
            assert body is not None  # the body's pattern matches the empty string
            end = body.end()
            if end < len(text) and text[end] == quote:
                parts.append(text[copied:start])
                parts.append("'<s>'")
                copied = end + 1
                found = _QUOTE.search(text, copied)
                continue
            unclosed[quote] = end
        found = _QUOTE.search(text, start + 1)
    parts.append(text[copied:])
    return "".join(parts)


def normalise(text: str) -> str:
    """Quoted strings → '<s>', numbers → '<n>', whitespace collapsed, at most 200 characters (of the first
    MAX_TEXT_CHARS of the text)."""
    text = _without_quoted(text[:MAX_TEXT_CHARS])
    text = _NUMBER.sub("<n>", text)
    return _SPACE.sub(" ", text).strip()[:SIGNATURE_CHARS]


def _error_text(value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for key in ("message", "type", "code"):
            if isinstance(value.get(key), str):
                return value[key]
    return json.dumps(value, sort_keys=True)


def argument_strings(arguments: str | None) -> list[str]:
    """The string values of a call's JSON arguments (nested ones too), longest first: the particulars an
    error may repeat unquoted ("station Oslo offline"). None or text that is not JSON: none."""
    try:
        parsed = json.loads(arguments) if arguments else None
    except (TypeError, ValueError):
        return []
    found: set[str] = set()
    pending = [parsed]
    while pending:
        value = pending.pop()
        if isinstance(value, str) and len(value.strip()) >= 2:
            found.add(value.strip())
        elif isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return sorted(found, key=lambda value: (-len(value), value))


def _without(text: str, particulars: Iterable[str]) -> str:
    """`text` (its first MAX_TEXT_CHARS) with each of `particulars` (as a whole word, any case) replaced by
    '<s>': the first MAX_PARTICULARS of them that are at most MAX_PARTICULAR_CHARS long."""
    text = text[:MAX_TEXT_CHARS]
    values = [value for value in particulars if len(value) <= min(MAX_PARTICULAR_CHARS, len(text))]
    for value in values[:MAX_PARTICULARS]:
        text = re.sub(rf"(?<!\w){re.escape(value)}(?!\w)", "<s>", text, flags=re.IGNORECASE)
    return text


def failure_signature(text: str | None, particulars: Iterable[str] = ()) -> str | None:
    """The normalised error of a tool result, None when the result is not a failure. A failure is a JSON
    object with a non-empty "error" or "errors" key (signature: that error's message) or text that starts with
    error, exception, traceback, failed, failure, fatal, could not, cannot or unable to (signature: its first
    line; for a traceback, its last line, which names the exception). `particulars` (the call's argument
    values) are taken out of the signature like quoted strings, so "station Oslo offline" and "station Lima
    offline" are one problem."""
    if text is None:
        return None
    particulars = list(particulars)
    text = str(text)
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        error = parsed.get("error") or parsed.get("errors")
        if not error:
            return None
        if isinstance(error, list) and error:
            error = error[0]
        return normalise(_without(_error_text(error), particulars)) or "error"
    if isinstance(parsed, str):
        text = parsed
    if not _FAILURE_START.match(text):
        return None
    lines = [line for line in text.strip().splitlines() if line.strip()]
    line = lines[-1] if lines[0].lower().startswith("traceback") else lines[0]
    return normalise(_without(line, particulars)) or "error"


def _json_type(value) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "num"
    if isinstance(value, str):
        return "str"
    if value is None:
        return "null"
    if isinstance(value, list):
        return "list"
    return "obj"


def shape_key_is_safe(key: str) -> bool:
    """An argument key a shape may name: an identifier (ASCII letters, digits, underscore, not starting with a
    digit) of at most SHAPE_KEY_CHARS characters. The keys are the model's or the agent's text, and a shape
    reaches a proposed system prompt, so nothing else of them is kept."""
    return (
        0 < len(key) <= SHAPE_KEY_CHARS
        and key.isascii()
        and (key[0].isalpha() or key[0] == "_")
        and all(char.isalnum() or char == "_" for char in key)
    )


def argument_shape(arguments: str | None) -> str:
    """The arguments' keys with their JSON types, sorted: '{city:str,days:num}'. Only safe keys are named
    (`shape_key_is_safe`), at most SHAPE_KEYS of them; the others are counted ('{city:str,+2 other}'); values
    are never copied, only their JSON types. A JSON value that is not an object gives its type; text that is
    not JSON gives '<invalid json>'."""
    try:
        parsed = json.loads(arguments) if arguments else {}
    except (TypeError, ValueError):
        return INVALID_JSON
    if not isinstance(parsed, dict):
        return _json_type(parsed)
    named = sorted(key for key in parsed if shape_key_is_safe(key))[:SHAPE_KEYS]
    parts = [f"{key}:{_json_type(parsed[key])}" for key in named]
    if len(parsed) > len(named):
        parts.append(f"+{len(parsed) - len(named)} other")
    return ("{" + ",".join(parts) + "}")[:SHAPE_CHARS]


def shape_is_safe(shape: str) -> bool:
    """Whether a stored shape reads as `argument_shape` writes one now (a row stored before keys were
    checked may not): braces around `key:type` parts with safe keys, and at most one '+N other'."""
    if shape in (INVALID_JSON, *_SHAPE_TYPES):
        return True
    if len(shape) > SHAPE_CHARS or not (shape.startswith("{") and shape.endswith("}")):
        return False
    inner = shape[1:-1]
    for part in inner.split(",") if inner else []:
        if part.startswith("+") and part.endswith(" other") and part[1:-6].isdigit():
            continue
        key, _, kind = part.partition(":")
        if not shape_key_is_safe(key) or kind not in _SHAPE_TYPES:
            return False
    return True


def is_malformed(arguments: str | None) -> bool:
    """A call whose arguments are not a JSON object: the tool could not have been run as the model meant."""
    try:
        return not isinstance(json.loads(arguments) if arguments else {}, dict)
    except (TypeError, ValueError):
        return True


def event_key(event: ToolEvent) -> tuple[str, str, str, str] | None:
    """(tool, kind, signature, argument shape) of a failing event; None when the event is no failure."""
    if event.malformed:
        return (event.tool, MALFORMED_CALL, MALFORMED_SIGNATURE, argument_shape(event.arguments))
    signature = failure_signature(event.result_text, argument_strings(event.arguments))
    if signature is None:
        return None
    return (event.tool, FAILED_RESULT, signature, argument_shape(event.arguments))


def _newest_distinct(values: Iterable[str], limit: int) -> list[str]:
    """The last `limit` distinct values, in their order (newest last)."""
    kept: list[str] = []
    for value in reversed(list(values)):
        if value not in kept:
            kept.append(value)
        if len(kept) == limit:
            break
    return list(reversed(kept))


def cluster(events: Iterable[ToolEvent]) -> list[Cluster]:
    """Failing events grouped by (tool, kind, signature, argument shape), largest group first; each with its
    count, first and last time, up to 10 distinct trajectory ids and 5 distinct arguments (newest last)."""
    groups: dict[tuple, list[ToolEvent]] = {}
    for event in events:
        key = event_key(event)
        if key is not None:
            groups.setdefault(key, []).append(event)
    clusters = []
    for (tool, kind, signature, shape), members in groups.items():
        members.sort(key=lambda event: event.at)
        clusters.append(
            Cluster(
                tool=tool,
                kind=kind,
                signature=signature,
                argument_shape=shape,
                count=len(members),
                first_seen=members[0].at,
                last_seen=members[-1].at,
                examples=_newest_distinct((event.trajectory_id for event in members), MAX_EXAMPLES),
                example_arguments=_newest_distinct(
                    (event.arguments for event in members), MAX_EXAMPLE_ARGUMENTS
                ),
            )
        )
    clusters.sort(key=lambda item: (-item.count, item.key))
    return clusters


def merge_examples(old: list[str], new: list[str], limit: int) -> list[str]:
    """Stored examples followed by newer ones: the last `limit` distinct, newest last."""
    return _newest_distinct([*old, *new], limit)
