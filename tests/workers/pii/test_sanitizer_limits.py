"""The sanitizer under hostile input: every built-in detector runs in linear time on input built to make it
backtrack or rescan, tenant patterns cannot run long, and what cannot be scanned is never passed through.

The time bounds are generous (the test machine is shared and noisy): a scan of 1 MiB must finish within a
few seconds plus a multiple of a plain linear pass over the same text. A quadratic detector takes minutes
on these inputs, so the bound separates the two without being tight."""

import json
import time

import pytest

from workers.pii import (
    PLACEHOLDER_TEMPLATE,
    UNSCANNED,
    CustomPattern,
    Sanitizer,
    SanitizeResult,
    ScanLimits,
)

SIZE = 1 << 20  # 1 MiB of hostile text per case
SANITIZER = Sanitizer(limits=ScanLimits(max_chars=4 * SIZE))


def _repeat(unit: str, size: int = SIZE) -> str:
    return (unit * (size // len(unit) + 1))[:size]


# One or more inputs per built-in detector, each shaped to defeat it: a long run its pattern swallows and
# then gives back, a prefix repeated at every position, a finding that frees its neighbour only once it is
# redacted (so a naive fixed point rescans the whole text once per finding), existing placeholders.
HOSTILE = {
    "jwt: eyJ repeated": _repeat("eyJ"),
    "jwt: segments without an end": _repeat("eyJAA."),
    "private_key: BEGIN then a long name": "-----BEGIN " + _repeat("A"),
    "private_key: many BEGIN lines": _repeat("-----BEGIN PRIVATE KEY-----"),
    "private_key: many END lines": "-----BEGIN PRIVATE KEY-----" + _repeat("-----END AAAA "),
    "api_key: sk- repeated": _repeat("sk-"),
    "api_key: short keys": _repeat(" sk-aaaaaaaaaaaaaaaaaaaaaaaaa"),
    "aws_access_key: AKIA repeated": _repeat("AKIA"),
    "aws_access_key: labels": _repeat("aws_secret_access_key = "),
    "aws_access_key: label then blanks": "secret_access_key:" + _repeat(" "),
    "iban: country and check digits repeated": _repeat("DE12 "),
    "iban: unregistered country repeated": _repeat("XX12 "),
    "iban: single characters": _repeat("AB12 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 "),
    "credit_card: groups failing Luhn": _repeat("4000 "),
    "credit_card: cards": _repeat("4111 1111 1111 1111 "),
    "email: @ repeated": _repeat("a@"),
    "email: long local parts": _repeat("a" * 63 + "@"),
    "email: addresses": _repeat("a@b.cc "),
    "email: addresses between placeholders": _repeat("[REDACTED:x] a@b.cc "),
    "email: glued addresses": _repeat("a@b.co"),
    "ip_address: dotted run": _repeat("1.1.1.1."),
    "ip_address: addresses": _repeat("1.1.1.1 "),
    "ip_address: colons": _repeat(":"),
    "ip_address: hex groups": _repeat("1::"),
    "ip_address: IPv6 addresses": _repeat("fe80::1 "),
    "phone: one international number without end": "+1" + _repeat(" 1"),
    "phone: plus signs": _repeat("+1 "),
    "phone: numbers chained by their separators": _repeat("(415) 555-0123 "),
    "phone: national numbers chained": _repeat("415-555-0123 "),
    "phone: trunk numbers": _repeat("020 7946 "),
    "digits": _repeat("1"),
    "everything at once": _repeat("a@b.cc 4111 1111 1111 1111 +44 20 7946 0958 1.2.3.4 fe80::1 eyJ sk- "),
}


def _linear_pass_seconds(text: str) -> float:
    """A plain Python pass over every character: the yardstick that scales with how busy the machine is."""
    started = time.process_time()
    sum(1 for character in text if character.isdigit())
    return time.process_time() - started


@pytest.mark.parametrize("name", list(HOSTILE))
def test_built_in_detectors_scan_hostile_input_in_linear_time(name):
    text = HOSTILE[name]
    yardstick = _linear_pass_seconds(text)

    started = time.process_time()
    result = SANITIZER.scan_text(text)
    elapsed = time.process_time() - started

    assert elapsed < 3.0 + 30 * yardstick, (
        f"{name}: {elapsed:.2f} s CPU for 1 MiB (linear pass {yardstick:.3f} s)"
    )
    assert UNSCANNED not in result.entities  # scanned for real, not given up on
    assert SANITIZER.scan_text(result.text).entities == ()


def test_a_chain_of_numbers_freed_one_by_one_is_still_redacted_completely():
    text = " ".join(["(415) 555-0123"] * 5000)

    result = SANITIZER.scan_text(text)

    assert result.entities == ("phone",)
    assert "555" not in result.text


def test_text_past_the_scan_limit_is_redacted_whole_as_unscanned():
    sanitizer = Sanitizer(limits=ScanLimits(max_chars=1000))

    result = sanitizer.scan_text("hello " * 200)

    assert result == SanitizeResult(PLACEHOLDER_TEMPLATE.format(entity=UNSCANNED), (UNSCANNED,))


def test_the_scan_limit_counts_every_string_of_a_value():
    sanitizer = Sanitizer(limits=ScanLimits(max_chars=1000))
    value = {"first": "a" * 600, "second": "mail me at a@b.com " + "b" * 600, "third": "short"}

    redacted, entities = sanitizer.scan_value(value)

    assert redacted["first"] == "a" * 600
    assert redacted["second"] == PLACEHOLDER_TEMPLATE.format(entity=UNSCANNED)  # never stored unscanned
    assert redacted["third"] == "short"
    assert entities == (UNSCANNED,)


@pytest.mark.parametrize(
    ("regex", "text"),
    [
        (r"(a+)+$", "a" * 50_000 + "!"),
        (r"(a|aa)+$", "a" * 50_000 + "!"),
        (r"(\w+\s?)+$", "ab " * 20_000 + "!"),
        (r"(x+x+)+y", "x" * 50_000),
    ],
)
def test_a_catastrophic_tenant_pattern_cannot_run_long_and_fails_closed(regex, text):
    sanitizer = Sanitizer([CustomPattern("slow", regex)], limits=ScanLimits(custom_seconds=0.2))

    started = time.process_time()
    result = sanitizer.scan_text(text)

    assert time.process_time() - started < 2.0
    assert result == SanitizeResult(PLACEHOLDER_TEMPLATE.format(entity=UNSCANNED), (UNSCANNED,))


def test_the_tenant_pattern_time_is_shared_by_every_string_of_a_message_list():
    sanitizer = Sanitizer([CustomPattern("slow", r"(a+)+$")], limits=ScanLimits(custom_seconds=0.2))
    messages = [{"role": "user", "content": "a" * 5000 + "!"} for _ in range(40)]

    started = time.process_time()
    redacted, entities = sanitizer.scan_messages(messages)

    assert time.process_time() - started < 3.0  # not 40 times the allowance
    assert entities == (UNSCANNED,)
    assert "aaaa" not in json.dumps(redacted)  # keys too are redacted whole once the time is up


def test_an_ordinary_tenant_pattern_still_redacts_under_the_time_limit():
    # The allowance is a wall-clock deadline and CI runs this beside other workers: 5 s is far past what a
    # linear pattern needs on 200 kB (about 0.05 s idle) and still a bound.
    sanitizer = Sanitizer([CustomPattern("employee", r"EMP-[0-9]{6}")], limits=ScanLimits(custom_seconds=5.0))

    result = sanitizer.scan_text(_repeat("EMP-123456 and ", 200_000))

    assert result.entities == ("custom:employee",)
