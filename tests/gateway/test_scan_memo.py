"""The memoized request scan (apps/gateway/scan_memo.py) redacts exactly as one scan of the whole value does,
and scans a message that comes back (an agent re-sending its conversation) only once."""

import json

import pytest

from apps.gateway import scan_memo
from workers.pii import CustomPattern, ScanLimits, sanitizer_for

CONVERSATION = [
    {"role": "system", "content": "You are a support agent. Escalate to ops@example.com when stuck."},
    {"role": "user", "content": "My card is 4111 1111 1111 1111 and my phone +1 415 555 0100, help"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "lookup", "arguments": json.dumps({"email": "jane.doe@example.org"})},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"ip": "203.0.113.7", "ok": True})},
    {"role": "user", "content": [{"type": "text", "text": "thanks, nothing personal here"}]},
]


def _observation(messages):
    return {
        "messages": messages,
        "prompt": None,
        "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}],
        "params": {"temperature": 0.7, "max_tokens": 16},
    }


class CountingScanner:
    """The real sanitizer, counting the scan calls that reach it."""

    def __init__(self, sanitizer):
        self.sanitizer, self.calls = sanitizer, 0
        self.limits = sanitizer.limits

    def scan_value(self, value):
        self.calls += 1
        return self.sanitizer.scan_value(value)


@pytest.fixture(autouse=True)
def _empty_memo():
    scan_memo.memo_clear()
    yield
    scan_memo.memo_clear()


@pytest.mark.parametrize("value", [_observation(CONVERSATION), CONVERSATION, CONVERSATION[1:2], []])
def test_the_same_redaction_as_one_scan_of_the_whole(value):
    sanitizer = sanitizer_for(())
    expected = sanitizer.scan_value(value)
    first = scan_memo.scan_request(sanitizer, value, has_custom_patterns=False)
    again = scan_memo.scan_request(sanitizer, value, has_custom_patterns=False)  # from the memo
    assert first == expected
    assert again == expected
    if value:
        assert json.dumps(first[0]) == json.dumps(expected[0])  # key order too
        assert "credit_card" in expected[1]  # every non-empty case carries the card: redaction is compared


def test_a_message_that_comes_back_is_scanned_once():
    scanner = CountingScanner(sanitizer_for(()))
    scan_memo.scan_request(scanner, _observation(CONVERSATION[:2]), has_custom_patterns=False)
    first_turn = scanner.calls  # two messages + the rest of the observation
    scanner.calls = 0
    redacted, entities = scan_memo.scan_request(
        scanner, _observation(CONVERSATION), has_custom_patterns=False
    )
    assert first_turn == 3
    assert scanner.calls == 1 + len(CONVERSATION) - 2  # the rest, and only the three new messages
    assert (redacted, entities) == sanitizer_for(()).scan_value(_observation(CONVERSATION))


def test_a_message_in_another_key_order_is_its_own_entry():
    sanitizer = sanitizer_for(())
    message = {"role": "user", "content": "mail jane.doe@example.org"}
    reordered = {"content": "mail jane.doe@example.org", "role": "user"}
    scan_memo.scan_request(sanitizer, [message], has_custom_patterns=False)
    redacted, _ = scan_memo.scan_request(sanitizer, [reordered], has_custom_patterns=False)
    assert list(redacted[0]) == ["content", "role"]


def test_tenant_patterns_and_large_values_are_scanned_whole():
    patterns = (CustomPattern(name="ticket", regex=r"TICKET-\d+"),)
    scanner = CountingScanner(sanitizer_for(patterns))
    messages = [{"role": "user", "content": "see TICKET-42"}, {"role": "user", "content": "and TICKET-43"}]
    assert scan_memo.scan_request(scanner, messages, has_custom_patterns=True) == sanitizer_for(
        patterns
    ).scan_value(messages)
    assert scanner.calls == 1  # one call: the tenant patterns' time budget is per call
    small = CountingScanner(sanitizer_for((), ScanLimits(max_chars=400)))
    long_messages = [{"role": "user", "content": "x" * 150}, {"role": "user", "content": "y" * 150}]
    result = scan_memo.scan_request(small, long_messages, has_custom_patterns=False)
    assert small.calls == 1  # past a quarter of the character budget: one scan, as before
    assert result == sanitizer_for((), ScanLimits(max_chars=400)).scan_value(long_messages)


def test_the_memo_keeps_no_raw_text_and_stays_bounded(monkeypatch):
    monkeypatch.setattr(scan_memo, "MEMO_ENTRIES", 3)
    sanitizer = sanitizer_for(())
    for number in range(5):
        scan_memo.scan_request(
            sanitizer,
            [{"role": "user", "content": f"call me on +1 415 555 01{number:02d}"}],
            has_custom_patterns=False,
        )
    assert len(scan_memo._memo) == 3
    kept = json.dumps([value for value, _ in scan_memo._memo.values()])
    assert "555" not in kept  # the values are redacted, the keys are hashes
    assert all(isinstance(key, bytes) and len(key) == 16 for key in scan_memo._memo)
