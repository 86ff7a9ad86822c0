"""The recording path's own capacity: journal to PostgreSQL, without HTTP in front of it (issue 30, part 6).

    python -m bench.gateway.ingest                                  # 1, 2 and 4 processes, 20,000 steps each
    python -m bench.gateway.ingest --processes 1 2 --steps 50000 --steps-per-session 8

What one gateway process does with each answered call after the answer, driven as fast as it goes:
the step record is made by the gateway's own code (`StepDraft`: the bench's chat turn, the upstream's answer
with its token ids and logprobs, PII mode `redact` as the bench tenant has it), appended to a `Journal`
(`apps.gateway.journal`, one JSON line, as a request does), and the journal is then flushed as its flusher
flushes a backlog: batches of `FLUSH_BATCH` records, each fdatasync + `steps_ingest` (COPY on PostgreSQL) +
the committed marker, on the flusher's own thread, then the metrics hook. Each process has its own journal
(as each web process does) and its own connection; all of them start flushing at the same moment.

Reported per process count: steps/s (all steps of all processes over the wall time from the common start
to the last process's last commit), the append cost (µs of the request path per step), and the steps
counted in the database afterwards against the steps journalled: the lost figure must be 0. A fresh
database per run (`areal_bench_ingest_<pid>`, dropped at the end), settings as `stack.py` sets them.
"""

import argparse
import asyncio
import json
import multiprocessing
import os
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from bench.gateway.run import request_body
from bench.gateway.stack import DEFAULT_PG_URL, TENANT_SLUG, GatewayStack
from bench.gateway.upstream import DEFAULT_MODEL, ID_MARK, build_completion

REPO_ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = REPO_ROOT / "bench" / "results"
GOAL_STEPS_PER_S = 5000.0


def _template_record(tenant_id: int) -> dict:
    """One step record as the gateway makes it for the benchmark's chat turn (run in a worker, Django set up)."""
    from apps.gateway.policy import policy_load
    from apps.gateway.principals import Principal
    from apps.gateway.recording import StepDraft
    from apps.gateway.sessions import SessionState

    policy = policy_load(tenant_id)
    principal = Principal(
        tenant_id=tenant_id, tenant_slug=TENANT_SLUG, key_prefix="sk-bench", scopes=("inference",)
    )
    draft = StepDraft.begin(
        principal=principal,
        policy=policy,
        endpoint="chat",
        request=request_body(DEFAULT_MODEL, False),
        headers={},
    )
    draft.attach(session=SessionState(session_id="template"), prompt_hash=None, backend=None)
    answer = json.loads(build_completion(DEFAULT_MODEL).replace(ID_MARK.encode(), b"chatcmpl-bench"))

    async def scanned() -> None:
        await draft.sanitize_request()
        draft.complete_unary(answer, latency_ms=1.0)
        await draft.sanitize_response()

    asyncio.run(scanned())
    record = draft.to_record()
    if record is None or not record.get("tokens"):
        raise RuntimeError("the template step has no token data (consent or PII redaction dropped it)")
    return record


def _records(template: dict, *, worker: int, steps: int, per_session: int) -> list[dict]:
    """`steps` records of sessions of `per_session` steps each (parent links as a session's turns have)."""
    records, parent = [], None
    stamp = datetime.now(UTC).isoformat()
    for index in range(steps):
        if index % per_session == 0:
            session_id, parent = f"ingest-{worker}-{index // per_session}-{uuid.uuid4().hex[:8]}", None
        step_id = str(uuid.uuid4())
        records.append(
            {
                **template,
                "step_id": step_id,
                "session_id": session_id,
                "parent_step_id": parent,
                "created_at": stamp,
            }
        )
        parent = step_id
    return records


def _worker(env: dict, worker: int, args: dict, barrier, results) -> None:
    os.environ.update(env)
    sys.path.insert(0, str(REPO_ROOT))
    import django

    django.setup()
    from apps.gateway import journal as journal_module
    from apps.tenants.models import Tenant

    if args["batch"]:
        journal_module.FLUSH_BATCH = args["batch"]
    tenant_id = Tenant.objects.get(slug=TENANT_SLUG).pk
    records = _records(
        _template_record(tenant_id), worker=worker, steps=args["steps"], per_session=args["per_session"]
    )
    directory = Path(tempfile.mkdtemp(prefix=f"areal-ingest-{worker}-"))

    async def drive() -> dict:
        journal = journal_module.Journal(directory)
        started = time.perf_counter()
        for record in records:
            journal.append(record)
        append_s = time.perf_counter() - started
        barrier.wait()  # every process has its backlog journalled: flush together
        flush_started = time.time()
        written = await journal.flush()
        flush_ended = time.time()
        journal.close()
        return {
            "worker": worker,
            "steps": len(records),
            "written": written,
            "append_us_per_step": append_s * 1e6 / len(records),
            "journal_bytes": journal.offset,
            "flush_started": flush_started,
            "flush_ended": flush_ended,
        }

    try:
        results.put(asyncio.run(drive()))
    except Exception as error:  # reported, and counted as lost
        results.put({"worker": worker, "error": f"{type(error).__name__}: {error}"})
        raise


def run_level(stack: GatewayStack, processes: int, args) -> dict:
    context = multiprocessing.get_context("spawn")  # a fresh interpreter each: no inherited connections
    barrier, results = context.Barrier(processes), context.Queue()
    before = stack.count_steps()
    spec = {"steps": args.steps, "per_session": args.steps_per_session, "batch": args.batch}
    workers = [
        context.Process(target=_worker, args=(stack.env(), number, spec, barrier, results))
        for number in range(processes)
    ]
    for process in workers:
        process.start()
    rows = [results.get(timeout=args.timeout) for _ in workers]
    for process in workers:
        process.join(timeout=60)
    failed = [row for row in rows if "error" in row]
    journalled = sum(row.get("steps", 0) for row in rows if "error" not in row)
    counted = stack.count_steps() - before
    expected = processes * args.steps
    row = {
        "processes": processes,
        "steps": expected,
        "errors": [row["error"] for row in failed],
        "written": sum(row.get("written", 0) for row in rows),
        "counted_in_database": counted,
        "lost": max(0, expected - counted),
        "journalled": journalled,
    }
    if not failed:
        wall = max(row["flush_ended"] for row in rows) - min(row["flush_started"] for row in rows)
        row.update(
            wall_s=wall,
            steps_per_s=counted / wall if wall > 0 else None,
            per_process_steps_per_s=[
                result["steps"] / (result["flush_ended"] - result["flush_started"]) for result in rows
            ],
            append_us_per_step=sum(result["append_us_per_step"] for result in rows) / len(rows),
            journal_bytes_per_step=sum(result["journal_bytes"] for result in rows) / journalled,
        )
    return row


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--steps", type=int, default=20000, help="steps per process (default 20,000)")
    parser.add_argument(
        "--steps-per-session",
        type=int,
        default=1,
        help="steps per session (1: the gateway bench's default path)",
    )
    parser.add_argument(
        "--batch", type=int, default=None, help="records per flush (default the journal's FLUSH_BATCH)"
    )
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for one process count")
    parser.add_argument("--out", type=Path)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = args.out or RESULTS_DIR / f"ingest-{stamp}.json"
    stack = GatewayStack("http://127.0.0.1:1", model=DEFAULT_MODEL, pg_url=args.pg_url)
    stack.db_name = f"areal_bench_ingest_{os.getpid()}"
    stack.database_url = stack.database_url.rsplit("/", 1)[0] + "/" + stack.db_name
    meta = {"started": stamp, "loadavg_start": os.getloadavg(), "cpus": os.cpu_count(), **vars(args)}
    meta["pg_url"], meta["out"] = args.pg_url, str(out)
    levels = []
    try:
        stack.create_database()
        stack._manage("migrate", "--noinput")
        stack._manage("createtenant", TENANT_SLUG, "--name", "Benchmark")
        print(
            f"ingest: database {stack.db_name}; {args.steps:,} steps per process, sessions of "
            f"{args.steps_per_session}, batches of {args.batch or 'FLUSH_BATCH (500)'}",
            flush=True,
        )
        for processes in args.processes:
            level = run_level(stack, processes, args)
            levels.append(level)
            print(_line(level), flush=True)
    finally:
        stack.close()
    meta["loadavg_end"] = os.getloadavg()
    print()
    print("processes  steps    steps/s  per process steps/s           append us/step  lost")
    for level in levels:
        per = ", ".join(f"{value:,.0f}" for value in level.get("per_process_steps_per_s", []))
        print(
            f"{level['processes']:9d}  {level['steps']:7,d}  {level.get('steps_per_s') or 0:7,.0f}  "
            f"{per:28s}  {level.get('append_us_per_step', 0):14.1f}  {level['lost']}"
        )
    best = max((level.get("steps_per_s") or 0 for level in levels), default=0)
    lost = sum(level["lost"] for level in levels)
    print(
        f"\ngoal >= {GOAL_STEPS_PER_S:,.0f} steps/s with none lost: best {best:,.0f} steps/s, {lost} lost: "
        + ("met" if best >= GOAL_STEPS_PER_S and lost == 0 else "NOT met")
    )
    print(f"load average {meta['loadavg_start'][0]:.2f} -> {meta['loadavg_end'][0]:.2f}; results in {out}")
    out.write_text(json.dumps({"meta": meta, "levels": levels}, indent=1))
    return 0 if lost == 0 else 1


def _line(level: dict) -> str:
    if level["errors"]:
        return f"{level['processes']} process(es): FAILED {level['errors']}"
    return (
        f"{level['processes']} process(es): {level['counted_in_database']:,} of {level['steps']:,} steps in the "
        f"database in {level['wall_s']:.2f} s: {level['steps_per_s']:,.0f} steps/s; lost {level['lost']}"
    )


if __name__ == "__main__":
    sys.exit(main())
