"""Gateway benchmark (issue 4, "Numbers"): the latency a proxy adds in front of an instant upstream, and
the requests per second it sustains, for the areal-web gateway and the LiteLLM proxy, in one run.

    python -m bench.gateway.run                                   # direct upstream + LiteLLM
    python -m bench.gateway.run --start-gateway                   # + the gateway, set up from nothing on
                                                                  #   a fresh PostgreSQL database, steps counted
    python -m bench.gateway.run --gateway-url http://127.0.0.1:8000 --gateway-key sk-... \\
        [--steps-url http://127.0.0.1:8000/api/v1/... ]           # + the areal-web gateway

Targets are measured round by round, interleaved (the order rotates each round), and every figure
reported is the median across rounds. The gateway must forward to this run's upstream (by default
http://127.0.0.1:18080, which this command starts; or pass --upstream-url for one already running).
See README.md beside this file.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

import httpx

from bench.gateway import load
from bench.gateway.litellm_peer import LiteLLMProxy, litellm_version
from bench.gateway.stack import DEFAULT_PG_URL, GatewayStack
from bench.gateway.upstream import DEFAULT_MODEL, running_upstream, wait_http_ready

REPO_ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = REPO_ROOT / "bench" / "results"

GOAL_ADDED_P50_MS = 1.0  # sequential
GOAL_ADDED_P99_MS = 3.0  # sequential
GOAL_RPS = 500.0


def request_body(model: str, stream: bool) -> dict:
    """A short agent turn, as an agent would send it (the gateway adds its own token-data options)."""
    body = {
        "model": model,
        "messages": [
            {"role": "system", "content": "You are a helpful assistant. Answer briefly."},
            {"role": "user", "content": "Say hello and offer help in one short sentence."},
        ],
        "max_tokens": 16,
        "temperature": 0.7,
    }
    if stream:
        body["stream"] = True
    return body


def responses_body(model: str, stream: bool) -> dict:
    """The same turn as `request_body` on the Responses API (`POST /v1/responses`), as the OpenAI Agents SDK
    sends it: instructions, one user input, the output cap; `store` left to its default (true), so the
    gateway keeps the response for `previous_response_id` as it does for an agent."""
    body = {
        "model": model,
        "instructions": "You are a helpful assistant. Answer briefly.",
        "input": [{"role": "user", "content": "Say hello and offer help in one short sentence."}],
        "max_output_tokens": 16,
        "temperature": 0.7,
    }
    if stream:
        body["stream"] = True
    return body


# -- CPU accounting of the server processes we know -----------------------------------------------------


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, user+system CPU seconds) of one process, from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


RECORDER_MODULE = b"apps.gateway.recorder"


def _is_recorder(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return RECORDER_MODULE in handle.read().split(b"\0")
    except OSError:
        return False


def tree_cpu_seconds(pid: int | None, *, recorders_only: bool = False) -> float | None:
    """CPU seconds used so far by `pid` and its live descendants (uvicorn/gunicorn workers, the gateway's
    recorder processes); `recorders_only`: by those descendants that are recorder processes."""
    if pid is None or _stat(pid) is None:
        return None
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None:
                stats[int(entry)] = stat
    children: dict[int, list[int]] = {}
    for child, (parent, _) in stats.items():
        children.setdefault(parent, []).append(child)
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        if current in stats and (not recorders_only or _is_recorder(current)):
            total += stats[current][1]
        todo.extend(children.get(current, []))
    return total


# -- targets --------------------------------------------------------------------------------------------


class Target:
    def __init__(
        self,
        name: str,
        chat_url: str,
        headers: dict,
        pid: int | None = None,
        stack: GatewayStack | None = None,
        body: dict | None = None,
        baseline: str = "direct",
    ):
        self.name, self.chat_url, self.headers, self.pid = name, chat_url, headers, pid
        self.stack = stack  # the gateway this run started: its persisted steps are counted per phase
        self.body = body  # this target's own request body (None: the run's chat body)
        self.baseline = baseline  # added latency is measured against this target (same round)
        self.probe: dict = {}


def probe(target: Target, body: dict) -> dict:
    """One request before measuring: does the target answer, and does its answer keep the token data?"""
    try:
        response = httpx.post(target.chat_url, headers=target.headers, json=body, timeout=60.0)
    except httpx.HTTPError as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    text = response.text
    payload = response.json() if response.status_code == 200 and not body.get("stream") else None
    result = {"ok": response.status_code == 200, "status": response.status_code}
    if response.status_code != 200:
        result["error"] = text[:2000]
        return result
    if payload is not None and payload.get("object") == "response":
        result["token_data"] = {"output": bool(payload.get("output")), "usage": bool(payload.get("usage"))}
    elif payload is not None:
        choice = (payload.get("choices") or [{}])[0]
        result["token_data"] = {
            "prompt_token_ids": payload.get("prompt_token_ids") is not None,
            "choices[0].token_ids": choice.get("token_ids") is not None,
            "choices[0].logprobs.content": bool((choice.get("logprobs") or {}).get("content")),
        }
    else:
        result["token_data"] = {
            "sse prompt_token_ids": '"prompt_token_ids"' in text,
            "sse token_ids": '"token_ids"' in text,
        }
    return result


def measure(target: Target, body: dict, args, upstream_pid: int | None) -> dict:
    """One round for one target: sequential, then each concurrency level."""
    body = target.body or body
    figures: dict = {}
    phases = [("seq", 1, args.requests)] + [
        (f"c{level}", level, args.concurrent_requests) for level in args.concurrency
    ]
    for phase, level, n in phases:
        steps_before = target.stack.count_steps() if target.stack else None
        phase_started = time.monotonic()
        cpu_client = time.process_time()
        cpu_target = tree_cpu_seconds(target.pid)
        cpu_recorders = tree_cpu_seconds(target.pid, recorders_only=True)
        cpu_upstream = tree_cpu_seconds(upstream_pid)
        if level == 1:
            latencies = load.run_async(
                load.run_sequential(
                    target.chat_url,
                    target.headers,
                    body,
                    n,
                    warmup=args.warmup,
                    engine=args.client,
                    max_seconds=args.phase_seconds,
                )
            )
            wall = sum(latencies)
        else:
            latencies, wall = load.run_async(
                load.run_concurrent(
                    target.chat_url,
                    target.headers,
                    body,
                    n,
                    level,
                    engine=args.client,
                    max_seconds=args.phase_seconds,
                )
            )
        done = max(1, len(latencies) + latencies.failed)
        phase_ended = time.monotonic()
        row = {
            **load.percentiles(latencies),
            "requests": len(latencies),
            "failed": latencies.failed,
            "errors": dict(latencies.errors),
            "wall_s": wall,
            "warmup_ok": latencies.warmup_ok,
            "warmup_failed": latencies.warmup_failed,
            "rps": len(latencies) / wall if wall > 0 else float("nan"),
            # includes the warm-up requests, whose count is small beside n
            "client_cpu_ms": (time.process_time() - cpu_client) * 1000.0 / done,
        }
        after = tree_cpu_seconds(target.pid)
        if cpu_target is not None and after is not None:
            row["server_cpu_ms"] = (after - cpu_target) * 1000.0 / done
        after = tree_cpu_seconds(target.pid, recorders_only=True)
        if cpu_recorders is not None and after is not None and after > cpu_recorders:
            row["recorder_cpu_ms"] = (after - cpu_recorders) * 1000.0 / done
        after = tree_cpu_seconds(upstream_pid)
        if cpu_upstream is not None and after is not None:
            row["upstream_cpu_ms"] = (after - cpu_upstream) * 1000.0 / done
        if target.stack is not None:
            row["persist"] = persistence(
                target.stack,
                steps_before,
                len(latencies) + latencies.warmup_ok,
                phase_started,
                phase_ended,
                args.steps_timeout,
            )
        figures[phase] = row
    return figures


def persistence(
    stack: GatewayStack, before: int, answered: int, started: float, ended: float, timeout: float
) -> dict:
    """How the phase's steps reached PostgreSQL: backlog when the last answer arrived, how long until every
    answered request's step was in the database, and steps persisted per second over the whole phase
    (from its first request, warm-ups included, to the moment the last of its steps was committed)."""
    at_end = stack.count_steps() - before
    count, when = stack.wait_for_steps(before + answered, timeout)
    persisted = count - before
    return {
        "answered": answered,
        "persisted": persisted,
        "backlog_at_end": max(0, answered - at_end),
        "drain_s": max(0.0, when - ended),
        "steps_per_s": persisted / (when - started) if when > started else None,
        "missing_after_wait": max(0, answered - persisted),
    }


# -- summary --------------------------------------------------------------------------------------------


def _median(values):
    values = [value for value in values if value is not None and value == value]
    return statistics.median(values) if values else None


def summarize(
    rounds: list[dict], names: list[str], phases: list[str], baselines: dict[str, str] | None = None
) -> dict:
    summary: dict = {"targets": {}, "added": {}, "ratio_gateway_over_litellm": {}}
    for name in names:
        per_phase = {}
        for phase in phases:
            rows = [round_[name][phase] for round_ in rounds if name in round_]
            per_phase[phase] = {
                key: _median([row.get(key) for row in rows])
                for key in (
                    "p50",
                    "p99",
                    "rps",
                    "client_cpu_ms",
                    "server_cpu_ms",
                    "recorder_cpu_ms",
                    "upstream_cpu_ms",
                )
            }
            per_phase[phase]["failed"] = sum(row["failed"] for row in rows)
            per_phase[phase]["requests"] = sum(row["requests"] for row in rows)
        summary["targets"][name] = per_phase
    baselines = baselines or {}
    for name in names:
        if name == "direct":
            continue
        base = baselines.get(name, "direct")
        summary["added"][name] = {
            phase: {
                q: _median([round_[name][phase][q] - round_[base][phase][q] for round_ in rounds])
                for q in ("p50", "p99")
            }
            for phase in phases
        }
    if "gateway" in names and "litellm" in names:
        ratio = {}
        for phase in phases:
            for q in ("p50", "p99"):
                ours, theirs = summary["added"]["gateway"][phase][q], summary["added"]["litellm"][phase][q]
                # an added latency at or below zero is within the direct baseline's noise: ratio 0
                ratio[f"added {phase} {q}"] = max(ours, 0.0) / theirs if theirs and theirs > 0 else None
            ours, theirs = (
                summary["targets"]["gateway"][phase]["rps"],
                summary["targets"]["litellm"][phase]["rps"],
            )
            if phase != "seq":
                ratio[f"req/s {phase}"] = ours / theirs if theirs else None
        summary["ratio_gateway_over_litellm"] = ratio
    return summary


def goals(summary: dict, names: list[str], phases: list[str]) -> list[dict]:
    top = phases[-1]
    rows = []
    for name in (n for n in names if n in ("litellm", "gateway")):
        added, figures = summary["added"][name], summary["targets"][name]
        rows.append(
            {
                "target": name,
                "goal": f"added p50 sequential <= {GOAL_ADDED_P50_MS:g} ms",
                "value": added["seq"]["p50"],
                "met": added["seq"]["p50"] <= GOAL_ADDED_P50_MS,
            }
        )
        rows.append(
            {
                "target": name,
                "goal": f"added p99 sequential <= {GOAL_ADDED_P99_MS:g} ms",
                "value": added["seq"]["p99"],
                "met": added["seq"]["p99"] <= GOAL_ADDED_P99_MS,
            }
        )
        rps = figures[top]["rps"]
        rows.append(
            {
                "target": name,
                "goal": f"req/s at {top[1:]} concurrent >= {GOAL_RPS:g}",
                "value": rps,
                "met": rps is not None and rps >= GOAL_RPS,
            }
        )
        if name == "gateway" and "litellm" in names:
            lower = all(
                summary["added"]["gateway"][phase][q] < summary["added"]["litellm"][phase][q]
                for phase in phases
                for q in ("p50", "p99")
            )
            rows.append(
                {
                    "target": name,
                    "goal": "added latency < LiteLLM's (p50 and p99, every concurrency)",
                    "value": None,
                    "met": lower,
                }
            )
    return rows


def _fmt(value, digits=2) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def _label(phase: str) -> str:
    return "seq" if phase == "seq" else f"@{phase[1:]}"


def print_report(summary: dict, goal_rows: list[dict], names: list[str], phases: list[str], meta: dict):
    print()
    print(
        f"== gateway benchmark: medians of {meta['rounds']} interleaved rounds "
        f"(client {meta['client']}, {'SSE' if meta['stream'] else 'JSON'} answers; latency in ms) =="
    )
    head = ["target"]
    for phase in phases:
        head += [f"{_label(phase)} p50", f"{_label(phase)} p99"]
    head += [f"req/s {_label(phase)}" for phase in phases if phase != "seq"]
    head += ["failed"] + [f"cpu ms/req {_label(phase)}" for phase in phases]
    table = [head]
    for name in names:
        figures = summary["targets"][name]
        row = [name]
        for phase in phases:
            row += [_fmt(figures[phase]["p50"]), _fmt(figures[phase]["p99"])]
        row += [_fmt(figures[phase]["rps"], 0) for phase in phases if phase != "seq"]
        row.append(str(sum(figures[phase]["failed"] for phase in phases)))
        cpu_key = "upstream_cpu_ms" if name == "direct" else "server_cpu_ms"
        row += [_fmt(figures[phase].get(cpu_key)) for phase in phases]
        table.append(row)
    _print_table(table)
    recorders = [
        (name, [summary["targets"][name][phase].get("recorder_cpu_ms") for phase in phases]) for name in names
    ]
    for name, figures in recorders:
        if any(figure is not None for figure in figures):
            print(
                f"  of {name}'s cpu ms/req, its recorder processes' (journal -> database): "
                + ", ".join(
                    f"{_label(phase)} {_fmt(figure)}" for phase, figure in zip(phases, figures, strict=True)
                )
            )
    if summary["added"]:
        print("\nadded latency vs direct (ms; median over rounds of target - direct in the same round)")
        table = [["proxy"] + [f"{_label(phase)} {q}" for phase in phases for q in ("p50", "p99")]]
        for name, added in summary["added"].items():
            table.append([name] + [_fmt(added[phase][q]) for phase in phases for q in ("p50", "p99")])
        _print_table(table)
    if summary["ratio_gateway_over_litellm"]:
        print("\ngateway / LiteLLM (added latency: lower is better; req/s: higher is better)")
        _print_table(
            [["figure", "ratio"]]
            + [[key, _fmt(value, 3)] for key, value in summary["ratio_gateway_over_litellm"].items()]
        )
    if goal_rows:
        print("\nissue 4 goals")
        _print_table(
            [["target", "goal", "measured", "met"]]
            + [
                [row["target"], row["goal"], _fmt(row["value"]), "yes" if row["met"] else "NO"]
                for row in goal_rows
            ]
        )
    print(
        "\ncpu ms/req: server CPU per request (direct: the upstream's; a proxy: its own process tree, the"
        " gateway's with --start-gateway or --gateway-pid; PostgreSQL's own CPU is not counted)."
    )


def _print_table(rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for index, row in enumerate(rows):
        cells = [
            cell.ljust(widths[i]) if i == 0 or _is_text(rows, i) else cell.rjust(widths[i])
            for i, cell in enumerate(row)
        ]
        print("  ".join(cells).rstrip())
        if index == 0:
            print("  ".join("-" * width for width in widths))


def _is_text(rows: list[list[str]], column: int) -> bool:
    """A column is text (left-aligned) when a body cell in it does not start like a number."""
    return any(row[column][:1].isalpha() and row[column] not in ("yes", "NO") for row in rows[1:])


def _round_line(number: int, name: str, figures: dict) -> str:
    parts = [f"round {number} {name:8}"]
    for phase, row in figures.items():
        text = f"{_label(phase)} n={row['requests']} p50 {row['p50']:.2f} p99 {row['p99']:.2f}"
        if phase != "seq":
            text += f" {row['rps']:.0f} req/s"
        if row["failed"]:
            text += f" FAILED {row['failed']} {row['errors']}"
        parts.append(text)
    return " | ".join(parts)


def recording_report(
    rounds: list[dict],
    phases: list[str],
    probes_ok: int,
    steps: dict,
    journal: dict,
    shutdown: dict,
    recorded: tuple[str, ...] = ("gateway",),
) -> dict:
    """Steps persisted in PostgreSQL against requests answered 200 (warm-ups and the probes included) by
    every target of the gateway (`recorded`: chat completions, and the Responses API when measured)."""
    answered = probes_ok + sum(
        round_[name][phase]["requests"] + round_[name][phase]["warmup_ok"]
        for round_ in rounds
        for name in recorded
        if name in round_
        for phase in phases
    )
    per_phase = {
        phase: {
            key: _median([round_["gateway"][phase]["persist"][key] for round_ in rounds])
            for key in ("steps_per_s", "drain_s", "backlog_at_end")
        }
        for phase in phases
    }
    return {
        "answered_200": answered,
        **steps,
        "lost": max(0, answered - steps["steps"]),
        "extra": max(0, steps["steps"] - answered),
        "per_phase": per_phase,
        "journal_left": journal,
        "shutdown": shutdown,
    }


def print_recording(report: dict, phases: list[str]) -> None:
    print("\ngateway recording (PostgreSQL, counted after the gateway was stopped)")
    lost = report["lost"]
    _print_table(
        [
            ["figure", "value"],
            ["requests answered 200 (measured + warm-ups + probes)", f"{report['answered_200']:,}"],
            ["steps persisted", f"{report['steps']:,}"],
            [
                "  of which without error, with prompt/completion ids + logprobs",
                f"{report['steps_ok']:,} / {report['steps_with_token_data']:,}",
            ],
            ["trajectories", f"{report['trajectories']:,}"],
            ["lost steps (answered 200, not in the database)", f"{lost:,}" + ("" if lost else "  (zero)")],
            [
                "journal bytes not marked committed at exit",
                f"{report['journal_left']['uncommitted_bytes']:,}",
            ],
            [
                "gateway shutdown",
                f"{report['shutdown'].get('how')} -> exit {report['shutdown'].get('returncode')}"
                f" in {report['shutdown'].get('seconds', 0):.1f} s",
            ],
        ]
    )
    print(
        "\nsteps persisted per second, per phase (median over rounds; first request to last step committed)"
    )
    table = [["phase", "steps/s persisted", "backlog at last answer", "drain s"]]
    for phase in phases:
        row = report["per_phase"][phase]
        table.append(
            [
                _label(phase),
                _fmt(row["steps_per_s"], 0),
                _fmt(row["backlog_at_end"], 0),
                _fmt(row["drain_s"], 3),
            ]
        )
    _print_table(table)


def fetch_steps(url: str, key: str | None) -> dict:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        response = httpx.get(url, headers=headers, timeout=60.0)
    except httpx.HTTPError as exc:
        return {"url": url, "error": f"{type(exc).__name__}: {exc}"}
    try:
        body = response.json()
    except ValueError:
        body = response.text[:100_000]
    return {"url": url, "status": response.status_code, "body": body}


# -- main -----------------------------------------------------------------------------------------------


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--requests", type=int, default=2000, help="sequential requests per target per round (default 2000)"
    )
    parser.add_argument(
        "--concurrent-requests",
        type=int,
        default=4000,
        help="requests per concurrency level per target per round (default 4000)",
    )
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=[32], help="concurrency levels besides 1 (default 32)"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--phase-seconds",
        type=float,
        default=15.0,
        help="no new request starts after this long in one phase, so a slow target takes"
        " fewer samples instead of minutes (default 15; 0 = no limit)",
    )
    parser.add_argument("--warmup", type=int, default=20, help="unmeasured sequential requests per phase")
    parser.add_argument("--client", choices=load.ENGINES, default="raw", help="load generator engine")
    parser.add_argument(
        "--stream", action="store_true", help="ask for SSE answers (latency to the last byte)"
    )
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument(
        "--upstream-port",
        type=int,
        default=18080,
        help="port for the upstream this command starts (default 18080)",
    )
    parser.add_argument("--upstream-url", help="use this already running upstream instead of starting one")
    parser.add_argument("--gateway-url", help="areal-web base URL; requests go to <url>/v1/chat/completions")
    parser.add_argument("--gateway-key", help="sent as Authorization: Bearer KEY")
    parser.add_argument(
        "--gateway-header",
        action="append",
        default=[],
        metavar="NAME:VALUE",
        help="extra header for gateway requests (repeatable)",
    )
    parser.add_argument("--gateway-pid", type=int, help="gateway server pid, to report its CPU per request")
    parser.add_argument("--skip-gateway", action="store_true", help="ignore --gateway-url / --start-gateway")
    parser.add_argument(
        "--start-gateway",
        action="store_true",
        help="set the gateway up from nothing: fresh PostgreSQL database (dropped afterwards),"
        " migrations, tenant, key, backend at this run's upstream, uvicorn; count its steps",
    )
    parser.add_argument(
        "--pg-url",
        default=DEFAULT_PG_URL,
        help=f"PostgreSQL server for --start-gateway (default {DEFAULT_PG_URL})",
    )
    parser.add_argument(
        "--gateway-workers", type=int, default=1, help="uvicorn --workers for --start-gateway"
    )
    parser.add_argument(
        "--keep-database", action="store_true", help="do not drop the --start-gateway database"
    )
    parser.add_argument(
        "--steps-timeout",
        type=float,
        default=60.0,
        help="seconds to wait after a gateway phase for its steps to reach the database",
    )
    parser.add_argument(
        "--redis-url",
        default="",
        help="with --start-gateway: run the gateway on this Redis (cache, shared session state), as production "
        "does; default: the embedded default",
    )
    parser.add_argument("--skip-litellm", action="store_true")
    parser.add_argument(
        "--skip-responses",
        action="store_true",
        help="with --start-gateway: do not also measure the gateway's /v1/responses (target `responses`)",
    )
    parser.add_argument("--litellm-workers", type=int, default=1, help="LiteLLM --num_workers (default 1)")
    parser.add_argument("--litellm-venv", type=Path, default=REPO_ROOT / ".venv-litellm")
    parser.add_argument("--steps-url", help="GET this after the run (with --steps-key) and print the answer")
    parser.add_argument("--steps-key", help="bearer key for --steps-url (default: --gateway-key)")
    parser.add_argument("--out", type=Path, help="results JSON (default bench/results/gateway-<time>.json)")
    args = parser.parse_args(argv)
    if args.gateway_url and not args.skip_gateway and not args.gateway_key:
        parser.error("--gateway-url needs --gateway-key")
    if args.start_gateway and args.gateway_url:
        parser.error("--start-gateway starts its own gateway: drop --gateway-url")
    if args.phase_seconds <= 0:
        args.phase_seconds = None
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out_path = args.out or RESULTS_DIR / f"gateway-{stamp}.json"
    body = request_body(args.model, args.stream)
    phases = ["seq"] + [f"c{level}" for level in args.concurrency]
    use_gateway = bool(args.gateway_url or args.start_gateway) and not args.skip_gateway
    meta = {
        "started": stamp,
        "rounds": args.rounds,
        "client": args.client,
        "stream": args.stream,
        "requests": args.requests,
        "concurrent_requests": args.concurrent_requests,
        "concurrency": args.concurrency,
        "phase_seconds": args.phase_seconds,
        "warmup": args.warmup,
        "model": args.model,
        "body": body,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "loadavg_start": os.getloadavg(),
        "litellm_workers": args.litellm_workers,
        "litellm_database": "none (PostgreSQL spend logs need Prisma engines unreachable here)",
    }
    started = time.monotonic()
    with ExitStack() as stack:
        if args.upstream_url:
            upstream_url, upstream_pid = args.upstream_url.rstrip("/"), None
            wait_http_ready(upstream_url + "/health", None, timeout=10.0)
        else:
            upstream_url, upstream_process = stack.enter_context(
                running_upstream(args.upstream_port, log=RESULTS_DIR / f"gateway-{stamp}-upstream.log")
            )
            upstream_pid = upstream_process.pid
        meta["upstream_url"] = upstream_url
        print(f"upstream: {upstream_url}")
        targets = [Target("direct", upstream_url + "/v1/chat/completions", {}, upstream_pid)]
        if not args.skip_litellm:
            meta["litellm_version"] = litellm_version(args.litellm_venv)
            litellm = LiteLLMProxy(
                upstream_url,
                model=args.model,
                workers=args.litellm_workers,
                venv=args.litellm_venv,
                workdir=RESULTS_DIR / f"gateway-{stamp}-litellm",
            )
            print(
                f"litellm {meta['litellm_version']}: starting on port {litellm.port} "
                f"({args.litellm_workers} worker(s), no database) ...",
                flush=True,
            )
            stack.enter_context(litellm)
            meta["litellm_startup_s"] = litellm.startup_seconds
            print(f"litellm: ready after {litellm.startup_seconds:.1f} s; log {litellm.log_path}")
            targets.append(Target("litellm", litellm.chat_url, litellm.headers, litellm.process.pid))
        stack_ = None
        if use_gateway and args.start_gateway:
            stack_ = GatewayStack(
                upstream_url,
                model=args.model,
                pg_url=args.pg_url,
                workers=args.gateway_workers,
                keep_database=args.keep_database,
                log_dir=RESULTS_DIR / f"gateway-{stamp}-gateway",
                redis_url=args.redis_url,
            )
            print(
                f"gateway: database {stack_.db_name}, migrations, tenant/key/backend, uvicorn on port "
                f"{stack_.port} ({args.gateway_workers} worker(s)) ...",
                flush=True,
            )
            stack.enter_context(stack_)
            meta["gateway_setup"] = {
                "database": stack_.db_name,
                "settings": "areal_web.settings.local",
                "debug": False,
                "redis": args.redis_url or "unset (file cache, SQLite shared state, in-memory channel layer)",
                "workers": args.gateway_workers,
                **stack_.timings,
            }
            print(
                f"gateway: ready (migrate {stack_.timings['migrate_s']:.1f} s, set-up "
                f"{stack_.timings['setup_s']:.1f} s, start {stack_.timings['startup_s']:.1f} s); "
                f"log {stack_.log_path}"
            )
            headers = dict(stack_.headers)
            for header in args.gateway_header:
                name, _, value = header.partition(":")
                headers[name.strip()] = value.strip()
            targets.append(Target("gateway", stack_.chat_url, headers, stack_.process.pid, stack=stack_))
            if not args.skip_responses:  # the same gateway on the Responses API, against direct chat
                targets.append(
                    Target(
                        "responses",
                        stack_.url + "/v1/responses",
                        headers,
                        stack_.process.pid,
                        stack=stack_,
                        body=responses_body(args.model, args.stream),
                    )
                )
        elif use_gateway:
            headers = {"Authorization": f"Bearer {args.gateway_key}"}
            for header in args.gateway_header:
                name, _, value = header.partition(":")
                headers[name.strip()] = value.strip()
            targets.append(
                Target(
                    "gateway",
                    args.gateway_url.rstrip("/") + "/v1/chat/completions",
                    headers,
                    args.gateway_pid,
                )
            )
        names = [target.name for target in targets]

        for target in targets:
            target.probe = probe(target, target.body or body)
            print(f"probe {target.name}: {json.dumps(target.probe)[:600]}")
            if not target.probe["ok"]:
                print(f"{target.name} does not answer 200; stopping.", file=sys.stderr)
                return 2

        rounds: list[dict] = []
        for number in range(1, args.rounds + 1):
            shift = (number - 1) % len(targets)
            order = targets[shift:] + targets[:shift]
            this_round = {}
            for target in order:
                this_round[target.name] = measure(target, body, args, upstream_pid)
                print(_round_line(number, target.name, this_round[target.name]), flush=True)
            rounds.append(this_round)

        meta["loadavg_end"] = os.getloadavg()
        recording = None
        if stack_ is not None:
            stack_.stop_server()
            recorded = tuple(target.name for target in targets if target.stack is not None)
            recording = recording_report(
                rounds,
                phases,
                sum(target.probe["ok"] for target in targets if target.stack is not None),
                stack_.step_summary(),
                stack_.journal_state(),
                stack_.shutdown,
                recorded,
            )
        summary = summarize(rounds, names, phases, {target.name: target.baseline for target in targets})
        goal_rows = goals(summary, names, phases)
        if recording is not None:
            goal_rows.append(
                {
                    "target": "gateway",
                    "goal": "zero lost steps",
                    "value": recording["lost"],
                    "met": recording["lost"] == 0,
                }
            )
        meta["duration_s"] = time.monotonic() - started
        print_report(summary, goal_rows, names, phases, meta)
        if recording is not None:
            print_recording(recording, phases)
        steps = None
        if args.steps_url:
            steps = fetch_steps(args.steps_url, args.steps_key or args.gateway_key)
            print(f"\nsteps ({args.steps_url}): HTTP {steps.get('status')}")
            print(json.dumps(steps.get("body", steps.get("error")), indent=1)[:4000])
        result = {
            "meta": meta,
            "probes": {target.name: target.probe for target in targets},
            "rounds": rounds,
            "summary": summary,
            "goals": goal_rows,
            "steps": steps,
            "recording": recording,
        }
        out_path.write_text(json.dumps(result, indent=1))
        print(
            f"\nload average {meta['loadavg_start'][0]:.2f} -> {meta['loadavg_end'][0]:.2f} "
            f"on {meta['cpus']} CPUs; {meta['duration_s']:.0f} s; results in {out_path}"
        )
        return 0


if __name__ == "__main__":
    sys.exit(main())
