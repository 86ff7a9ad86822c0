"""ATDP JSON Lines: one trajectory per line, compact separators, UTF-8. Writing streams; reading
validates every line and reports bad ones by line number without stopping."""

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from workers.atdp.validate import Problem, validate_trajectory

_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
# Legal inside JSON strings, but str.splitlines() and some editors break lines on them.
_UNICODE_LINE_BREAKS = re.compile("[\u0085\u2028\u2029]")


@dataclass(frozen=True, slots=True)
class ImportLine:
    """One non-blank input line: `record` when it is a valid ATDP trajectory, else None and `problems`."""

    line_number: int
    record: dict | None
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.record is not None


def write_jsonl(records: Iterable[dict], out: BinaryIO) -> int:
    """Writes each record as one line to the binary stream `out`; returns how many. Streams: holds one
    record at a time. Does not validate (callers run validate_trajectory where records come from outside).
    NaN and infinities are refused (they are not JSON); U+0085, U+2028 and U+2029 are written escaped so
    every line reader splits the file the same way."""
    count = 0
    for record in records:
        try:
            text = _ENCODER.encode(record)
        except (TypeError, ValueError) as error:
            raise ValueError(f"record {count}: cannot be written as JSON: {error}") from error
        if _UNICODE_LINE_BREAKS.search(text):
            text = _UNICODE_LINE_BREAKS.sub(lambda match: f"\\u{ord(match[0]):04x}", text)
        out.write(text.encode("utf-8", errors="strict") + b"\n")
        count += 1
    return count


class _NonStandardConstant(ValueError):
    pass


def _refuse_constant(name: str):
    raise _NonStandardConstant(name)


def read_jsonl(lines: Iterable[bytes | str]) -> Iterator[ImportLine]:
    """Parses and validates ATDP JSON Lines. `lines` is any iterable of lines (a file opened in binary
    mode, a list of str); numbering starts at 1 and counts blank lines, which are skipped. A leading
    UTF-8 byte-order mark is ignored. Yields one ImportLine per non-blank line:
    - bad UTF-8 or bad JSON: one problem at path "" naming the error and its byte or column;
    - JSON that is not a valid trajectory: the validator's problems, with field paths;
    - a valid trajectory: the record and no problems."""
    for line_number, line in enumerate(lines, start=1):
        if isinstance(line, (bytes, bytearray, memoryview)):
            try:
                text = bytes(line).decode("utf-8")
            except UnicodeDecodeError as error:
                yield ImportLine(line_number, None, [Problem("", f"invalid UTF-8 at byte {error.start + 1}")])
                continue
        else:
            text = line
        if line_number == 1:
            text = text.removeprefix("\ufeff")
        if not text.strip():
            continue
        try:
            record = json.loads(text, parse_constant=_refuse_constant)
        except json.JSONDecodeError as error:
            message = f"invalid JSON: {error.msg} at column {error.colno}"
            yield ImportLine(line_number, None, [Problem("", message)])
            continue
        except _NonStandardConstant as error:
            yield ImportLine(line_number, None, [Problem("", f"invalid JSON: {error} is not a JSON number")])
            continue
        except RecursionError:
            yield ImportLine(line_number, None, [Problem("", "invalid JSON: nested too deeply")])
            continue
        problems = validate_trajectory(record)
        yield ImportLine(line_number, None if problems else record, problems)
