"""Soak: mixed traffic at half the measured capacity for a long while (15 minutes by default), on a gateway
set up from nothing on PostgreSQL (bench.gateway.stack) in front of the instant upstream.

    python -m bench.reliability.soak                 # 15 minutes
    python -m bench.reliability.soak --minutes 3     # a shorter look

The mix, by request index: chat completions (60 %), streamed chat completions (20 %), rewards on an
earlier session (10 %, `POST /v1/rewards`) and console reads of the trajectory list (10 %,
`GET /api/v1/trajectories/`). Chats carry `X-Session-Id`, four turns a session.

1. Capacity: the same mix in a closed loop (`--concurrency` in flight) for `--capacity-seconds`: the
   answered requests per second.
2. Soak: an open loop at half that rate for `--minutes`.
3. Per minute: requests, errors, p99 latency, the gateway process tree's RSS. Then the journal is drained
   and the gateway stopped (its shutdown flushes), and the chats answered 200 are compared with the steps
   persisted: lost steps (goal 0).

Reported against the first minute of the same run, since absolute figures on a busy 2-core machine mean
little: RSS growth (last minute / first minute) and p99 drift (last minute / first minute).
"""

import argparse
import asyncio
import json
import os
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.gateway.stack import TENANT_SLUG, GatewayStack
from bench.gateway.upstream import DEFAULT_MODEL, free_port, running_upstream
from bench.reliability.faults import _count_steps, _drain
from bench.reliability.traffic import Call, closed_loop, open_loop, p99_ms, statuses

REPO_ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = REPO_ROOT / "bench" / "results"
TURNS_PER_SESSION = 4
MESSAGES = [{"role": "user", "content": "Say hello in one short sentence."}]


def mixed_call(index: int) -> Call:
    session = f"soak-{index // TURNS_PER_SESSION}"
    slot = index % 10
    if slot == 8 and index >= 200:
        earlier = f"soak-{(index - 100) // TURNS_PER_SESSION}"
        return Call(
            "reward",
            "POST",
            "/v1/rewards",
            body={"session_id": earlier, "value": 1.0, "idempotency_key": f"soak-{index}"},
        )
    if slot == 9:
        return Call("console", "GET", "/api/v1/trajectories/?limit=20")
    stream = slot in (6, 7)
    body = {"model": DEFAULT_MODEL, "max_tokens": 16, "messages": MESSAGES, "stream": stream}
    return Call(
        "stream" if stream else "chat",
        "POST",
        "/v1/chat/completions",
        body=body,
        headers={"X-Session-Id": session},
        stream=stream,
    )


def rss_tree_mib(pid: int) -> float | None:
    """Resident memory of `pid` and its descendants, MiB (from /proc)."""
    parents, rss = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as handle:
                fields = dict(line.split(":", 1) for line in handle if ":" in line)
        except OSError:
            continue
        parents[int(entry)] = int(fields["PPid"].strip())
        rss[int(entry)] = int(fields.get("VmRSS", "0 kB").split()[0]) / 1024
    if pid not in rss:
        return None
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        total += rss.get(current, 0.0)
        todo.extend(child for child, parent in parents.items() if parent == current)
    return total


def sample_rss(pid: int, every: float, stop: threading.Event, samples: list) -> None:
    started = time.monotonic()
    while not stop.is_set():
        samples.append((time.monotonic() - started, rss_tree_mib(pid)))
        stop.wait(every)


def per_minute(outcomes, started: float, rss_samples) -> list[dict]:
    rows = []
    minutes = int((max(outcome.ended for outcome in outcomes) - started) // 60) + 1
    for minute in range(minutes):
        window = [
            outcome for outcome in outcomes if minute * 60 <= outcome.started - started < (minute + 1) * 60
        ]
        rss = [value for at, value in rss_samples if minute * 60 <= at < (minute + 1) * 60 and value]
        if not window:
            continue
        rows.append(
            {
                "minute": minute + 1,
                "requests": len(window),
                "errors": sum(not o.ok for o in window),
                "p99_ms": p99_ms(window),
                "p99_chat_ms": p99_ms([o for o in window if o.kind == "chat"]),
                "rss_mib": max(rss) if rss else None,
            }
        )
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--capacity-seconds", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--workers", type=int, default=1, help="uvicorn workers of the gateway")
    args = parser.parse_args(argv)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    log_dir = RESULTS_DIR / f"soak-{stamp}"
    with (
        running_upstream(free_port(), log=None) as (upstream_url, _),
        GatewayStack(upstream_url, model=DEFAULT_MODEL, workers=args.workers, log_dir=log_dir) as stack,
    ):
        key = (
            stack._manage(
                "createapikey",
                TENANT_SLUG,
                "--scope",
                "inference",
                "--scope",
                "rewards:write",
                "--scope",
                "trajectories:read",
                "--name",
                "soak",
            )
            .strip()
            .splitlines()[-1]
            .strip()
        )
        headers = {"Authorization": f"Bearer {key}"}
        steps_before = _count_steps(stack)
        capacity_run = asyncio.run(
            closed_loop(
                stack.url,
                headers,
                lambda index: mixed_call(10_000_000 + index),
                concurrency=args.concurrency,
                seconds=args.capacity_seconds,
            )
        )
        capacity = sum(outcome.ok for outcome in capacity_run) / args.capacity_seconds
        rate = capacity / 2
        print(
            f"capacity {capacity:.0f} req/s (mixed, {args.concurrency} in flight); soaking at {rate:.0f} req/s "
            f"for {args.minutes:g} minutes",
            flush=True,
        )

        stop, rss_samples = threading.Event(), []
        sampler = threading.Thread(
            target=sample_rss, args=(stack.process.pid, 10.0, stop, rss_samples), daemon=True
        )
        started = time.monotonic()
        sampler.start()
        outcomes = asyncio.run(
            open_loop(stack.url, headers, mixed_call, rate=rate, seconds=args.minutes * 60)
        )
        stop.set()
        sampler.join()

        recorded = [o for o in capacity_run + outcomes if o.kind in ("chat", "stream") and o.ok]
        expected = steps_before + len(recorded)
        persisted = _drain(stack, expected, 120)
        stack.stop_server()
        persisted = _drain(stack, expected, 10)

    minutes = per_minute(outcomes, started, rss_samples)
    first, last = minutes[0], minutes[-1]
    summary = {
        "capacity_rps": round(capacity, 1),
        "soak_rps": round(rate, 1),
        "minutes": args.minutes,
        "requests": len(outcomes),
        "statuses": statuses(outcomes),
        "by_kind": {
            kind: statuses([o for o in outcomes if o.kind == kind])
            for kind in ("chat", "stream", "reward", "console")
        },
        "rss_first_mib": first["rss_mib"],
        "rss_last_mib": last["rss_mib"],
        "rss_growth": (last["rss_mib"] / first["rss_mib"]) if first["rss_mib"] and last["rss_mib"] else None,
        "p99_first_ms": first["p99_ms"],
        "p99_last_ms": last["p99_ms"],
        "p99_drift": (last["p99_ms"] / first["p99_ms"]) if first["p99_ms"] and last["p99_ms"] else None,
        "steps_expected": expected,
        "steps_persisted": persisted,
        "lost_steps": max(0, expected - persisted),
        "per_minute": minutes,
    }
    print("| minute | requests | errors | p99 ms (all) | p99 ms (chat) | RSS MiB |")
    print("|---|---|---|---|---|---|")
    for row in minutes:
        print(
            f"| {row['minute']} | {row['requests']} | {row['errors']} | {row['p99_ms'] or 0:.1f} | "
            f"{row['p99_chat_ms'] or 0:.1f} | {row['rss_mib'] or 0:.0f} |"
        )
    print(json.dumps({key: value for key, value in summary.items() if key != "per_minute"}, indent=2))
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / "results.json").write_text(json.dumps(summary, indent=2))
    return 0 if summary["lost_steps"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
