"""Micro-benchmark of the PII sanitizer (workers/pii): CPU microseconds per message, best of several repeats
(process CPU time rather than wall time, so that other work on a shared machine disturbs it less).

    .venv/bin/python -m bench.sanitizer [--repeats 7] [--seconds 0.2] [--hostile-chars 65536]

Cases: clean prose (the common case, which the prefilters should make cheap), clean text full of numbers
that are not PII (dates, prices, versions, ids: the prefilters pass and the digit detectors run), a
PII-heavy message, a four-message chat with a tool call through `scan_messages`, and hostile texts built
to make a detector backtrack or rescan (each detector must stay linear: see
tests/workers/pii/test_sanitizer_limits.py). The last column divides each time by a baseline printed first:
one plain Python pass over the same text (a per-character generator), so the figures compare across
machines and loads.
"""

import argparse
import base64
import json
import time
import timeit

from workers.pii import CustomPattern, Sanitizer

PROSE = (
    "Thanks for the detailed report. I looked into the deployment logs and the failure happens when the "
    "worker restarts while a batch is still being written: the writer holds the lock, the new worker waits "
    "for it, and after the timeout both give up. Here is what I suggest. First, shorten the lock lease so "
    "that a dead worker releases it quickly. Second, make the batch write idempotent, keyed by the batch "
    "number, so that a retry cannot double count. Third, add a metric for lock waits so we can see this "
    "coming next time. I can open a pull request for the first two today; the metric needs a dashboard "
    "change, which the platform team owns. Let me know if you would rather keep the current lease while "
    "we test it in staging for 3 days. Über-important: the café team in Zürich asked for the same fix. "
)
CLEAN = PROSE * 2
NUMERIC = (
    "Release v2.14.3 shipped on 2026-11-22 at 10:30:00+01:00; order ORD-12345 cost $1,234.56 (tax 19.5%), "
    'batch 48213 took 12.75 s over 3 retries, tokens [15496, 11, 995, 13, 2026] and {"a": 12, "b": 30}. '
    "Unix time 1732252800123, build 20261122.4, checksum 9f86d081884c7d659a2feaa0c55ad015, "
) * 5
PII = (
    "Contact jane.doe@example.com or +44 20 7946 0958, US office (415) 555-0123. Card 4111 1111 1111 1111, "
    "IBAN DE89 3704 0044 0532 0130 00. Server 192.168.10.24 and 2001:db8::8a2e:370:7334. "
    "Key sk-proj-Abc123def456GHI789jkl012MNO345pqr678 and AKIAIOSFODNN7EXAMPLE. "
) * 4


def _jwt() -> str:
    def encode(part: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(part).encode()).decode().rstrip("=")

    return f"{encode({'alg': 'HS256', 'typ': 'JWT'})}.{encode({'sub': '42'})}.c2lnbmF0dXJl"


CHAT = [
    {"role": "system", "content": PROSE},
    {"role": "user", "content": [{"type": "text", "text": PROSE + " My email is sam@example.org."}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {
                    "name": "lookup_order",
                    "arguments": json.dumps({"order": "ORD-12345", "token": _jwt()}),
                },
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"status": "shipped", "items": 3})},
]


def _repeat(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


HOSTILE = {  # name: repeated unit
    "hostile: eyJ repeated (jwt)": "eyJ",
    "hostile: chained phones": "(415) 555-0123 ",
    "hostile: IBAN-shaped groups": "DE12 ",
    "hostile: card groups failing Luhn": "4000 ",
    "hostile: addresses and placeholders": "[REDACTED:x] a@b.cc ",
    "hostile: IPv6 addresses": "fe80::1 ",
}


def linear_pass(text: str) -> int:
    return sum(1 for character in text if character.isdigit())


def microseconds_per_call(function, repeats: int, seconds: float) -> float:
    timer = timeit.Timer(function, timer=time.process_time)
    number, _ = timer.autorange()
    number = max(1, int(number * seconds / 0.2))
    return min(timer.repeat(repeat=repeats, number=number)) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=0.2, help="rough time per repeat")
    parser.add_argument("--hostile-chars", type=int, default=65536, help="size of each hostile text")
    arguments = parser.parse_args()
    plain = Sanitizer()
    tenant = Sanitizer(
        [CustomPattern("employee", r"EMP-[0-9]{6}"), CustomPattern("ticket", r"\bTCK[0-9]{5}\b")]
    )
    cases = [
        ("clean prose", len(CLEAN), lambda: plain.scan_text(CLEAN)),
        ("clean prose, 2 tenant patterns", len(CLEAN), lambda: tenant.scan_text(CLEAN)),
        ("numbers that are not PII", len(NUMERIC), lambda: plain.scan_text(NUMERIC)),
        ("PII-heavy", len(PII), lambda: plain.scan_text(PII)),
        ("chat, 4 messages + tool call", len(json.dumps(CHAT)), lambda: plain.scan_messages(CHAT)),
    ]
    for name, unit in HOSTILE.items():
        text = _repeat(unit, arguments.hostile_chars)
        cases.append((name, len(text), lambda text=text: plain.scan_text(text)))
    baseline = microseconds_per_call(lambda: linear_pass(CLEAN), arguments.repeats, arguments.seconds) / len(
        CLEAN
    )
    print(f"baseline: one Python pass over the text, {baseline * 1000:.1f} CPU ns per character")
    print(f"{'case':36} {'chars':>7} {'CPU µs/message':>15} {'× baseline':>11}")
    for name, size, function in cases:
        microseconds = microseconds_per_call(function, arguments.repeats, arguments.seconds)
        print(f"{name:36} {size:7d} {microseconds:15.1f} {microseconds / (baseline * size):11.1f}")


if __name__ == "__main__":
    main()
