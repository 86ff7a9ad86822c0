"""The PII scan of a request's messages, each message scanned once per process while it keeps coming back.

An agent sends its whole conversation on every turn, so without a memo each turn scans every earlier message
again (a conversation of n turns costs n² message scans). `scan_request` scans a request's value (the step's
observation, or the messages under PII mode `block`) to the same result as `Sanitizer.scan_value` on the whole
of it, taking each message it has already scanned from a per-process memo:

- only where the parts cannot be scanned differently from the whole: no tenant patterns (their time budget is
  per scan call) and the value's text far inside the scan's character budget (`ScanLimits.max_chars`, per call:
  a quarter of it, since a JSON string may be read twice), so no string of the whole would have been left
  unscanned; otherwise the whole value is scanned as before;
- keyed by a hash of the message's JSON (key order included), so the memo holds no raw text, only the
  redacted message and its entity types; messages over `MEMO_MAX_CHARS` are not kept;
- bounded: `MEMO_ENTRIES` messages, least recently used first out.

The redacted messages it returns may be shared between steps: they are only ever serialized, never changed.
"""

import hashlib
import json
import threading
from collections import OrderedDict

MEMO_ENTRIES = 2048
MEMO_MAX_CHARS = 16 * 1024
_memo: OrderedDict[bytes, tuple[object, tuple[str, ...]]] = OrderedDict()
_lock = threading.Lock()  # scans of large requests run in a thread pool (pii_scans.py)


def text_size(value, limit: int) -> int:
    """Characters of the strings (dict keys included) in a JSON-like value, counted until past `limit`."""
    if isinstance(value, str):
        return len(value)
    total, pending = 0, [value]
    while pending and total <= limit:
        item = pending.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            total += sum(len(key) for key in item if isinstance(key, str))
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return total


def _scan_message(scanner, message) -> tuple[object, tuple[str, ...]]:
    if text_size(message, MEMO_MAX_CHARS) > MEMO_MAX_CHARS:
        return scanner.scan_value(message)
    key = hashlib.blake2b(
        json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"),
        digest_size=16,
    ).digest()
    with _lock:
        found = _memo.get(key)
        if found is not None:
            _memo.move_to_end(key)
            return found
    found = scanner.scan_value(message)
    with _lock:
        _memo[key] = found
        if len(_memo) > MEMO_ENTRIES:
            _memo.popitem(last=False)
    return found


def scan_request(scanner, value, *, has_custom_patterns: bool, size: int | None = None):
    """(redacted value, entity types) as `scanner.scan_value(value)` gives them. `value`: a list of messages, or
    a dict whose "messages" entry is one (the observation); `size`: its text size, when the caller knows it."""
    messages = value.get("messages") if isinstance(value, dict) else value
    if has_custom_patterns or not isinstance(messages, list):
        return scanner.scan_value(value)
    budget = scanner.limits.max_chars // 4
    if (size if size is not None else text_size(value, budget)) > budget:
        return scanner.scan_value(value)
    entities: set[str] = set()
    redacted_messages = []
    for message in messages:
        redacted, found = _scan_message(scanner, message)
        redacted_messages.append(redacted)
        entities.update(found)
    if not isinstance(value, dict):
        return redacted_messages, tuple(sorted(entities))
    rest, found = scanner.scan_value({key: item for key, item in value.items() if key != "messages"})
    if set(rest) != set(value) - {"messages"}:  # a key was redacted: the whole value's scan decides
        return scanner.scan_value(value)
    entities.update(found)
    # the whole value's keys in their order: "messages" where it was
    redacted = {key: redacted_messages if key == "messages" else rest[key] for key in value}
    return redacted, tuple(sorted(entities))


def memo_clear() -> None:
    with _lock:
        _memo.clear()
