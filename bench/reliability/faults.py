"""Faults under load, on loopback only: what clients saw, accepted steps lost (goal 0), time to recover.

    python -m bench.reliability.faults                      # every scenario
    python -m bench.reliability.faults --scenario postgres  # one

Scenarios (each on a gateway set up from nothing by bench.gateway.stack, against PostgreSQL, in front of
the instant upstream of bench.gateway.upstream, under a closed-loop burst of chat completions):

- `postgres`: the PostgreSQL server is restarted (`pg_ctlcluster ... restart`) in the middle of the burst.
  Needs root and a local cluster; it ends every connection of every database on that server, so run it on
  a machine where nothing else uses the server at the time.
- `journal-full`: the gateway's journal folder is a small tmpfs; in the middle of the burst a filler file
  takes all its free space, and is removed some seconds later. Needs root (mount).
- `redis`: the stack runs on Redis (cache, Celery broker, channel layer) with a real Celery worker and a
  signed-in WebSocket client on the tenant's live traffic stream; the burst sends chats and rewards (each
  reward enqueues the trajectory's qualification on the worker); the local Redis server is shut down and
  started again mid-burst (it keeps nothing on disk, as here). Reported besides the gateway's answers:
  rewarded trajectories never qualified (a task lost with the broker), and whether the WebSocket saw live
  points again after the restart (and after a reconnect). Like `postgres`, it disturbs every user of the
  server.

"Accepted steps lost" counts chat completions answered 200 whose step never reached the database after the
gateway drained (and, at the end, stopped and flushed). "Recovered" is the time from the end of the fault to
the first 200, and the failures are listed by status (0 = no HTTP answer).

Worker kills are covered by tests: a worker SIGKILLed mid-job
(tests/training/test_jobs_worker.py) and mid eval run (tests/evaluation/test_eval_worker_killed.py).
"""

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from areal_web.queues import Queue
from bench.gateway.stack import DEFAULT_PG_URL, GatewayStack
from bench.gateway.upstream import DEFAULT_MODEL, free_port, running_upstream
from bench.reliability.traffic import Call, closed_loop, statuses

REPO_ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = REPO_ROOT / "bench" / "results"
CHAT = Call(
    "chat",
    "POST",
    "/v1/chat/completions",
    body={
        "model": DEFAULT_MODEL,
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "Say hello in one short sentence."}],
    },
)


def _count_steps(stack: GatewayStack) -> int | None:
    """The persisted steps, or None while the database is unreachable (the counter reconnects)."""
    try:
        return stack.count_steps()
    except psycopg.Error:
        with contextlib.suppress(Exception):
            stack._counter.close()
        stack._counter = None
        return None


def _drain(stack: GatewayStack, target: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    count = None
    while time.monotonic() < deadline:
        count = _count_steps(stack)
        if count is not None and count >= target:
            return count
        time.sleep(0.25)
    return count if count is not None else -1


def _restart_postgres(cluster: str) -> None:
    version = sorted(os.listdir("/etc/postgresql"))[-1]
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, cluster, "restart"],
        check=True,
        capture_output=True,
        timeout=120,
    )


def _fill(folder: Path) -> Path:
    """Writes a filler file in `folder` until its file system is full; returns it."""
    filler = folder / "filler.bin"
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (1 << 20, 4096, 1):
            with contextlib.suppress(OSError):
                while os.write(descriptor, b"\0" * size):
                    pass
    finally:
        os.close(descriptor)
    return filler


def _report(
    name: str,
    outcomes,
    fault_started: float,
    fault_ended: float,
    answered_before: int,
    steps_before: int,
    steps_after: int,
    stack: GatewayStack,
) -> dict:
    chat = [outcome for outcome in outcomes if outcome.kind == "chat"]
    answered = sum(outcome.ok for outcome in chat)
    during = [
        outcome for outcome in chat if outcome.ended >= fault_started and outcome.started <= fault_ended
    ]
    failed = [outcome for outcome in chat if not outcome.ok]
    after = [outcome for outcome in chat if outcome.ok and outcome.started >= fault_ended]
    recovered = (min(outcome.ended for outcome in after) - fault_ended) if after else None
    last_failure = (max(outcome.ended for outcome in failed) - fault_ended) if failed else None
    expected = steps_before + answered
    return {
        "scenario": name,
        "requests": len(chat),
        "answered_200": answered,
        "statuses": statuses(chat),
        "statuses_during_fault": statuses(during),
        "failures_with_retry_after": sum(1 for outcome in failed if outcome.retry_after),
        "fault_seconds": round(fault_ended - fault_started, 2),
        "recovered_seconds": None if recovered is None else round(recovered, 2),
        "last_failure_after_fault_end_seconds": None if last_failure is None else round(last_failure, 2),
        "median_ms_by_kind": {
            kind: round(
                statistics.median((o.ended - o.started) * 1000 for o in outcomes if o.kind == kind and o.ok),
                1,
            )
            for kind in sorted({o.kind for o in outcomes})
            if any(o.ok for o in outcomes if o.kind == kind)
        },
        "steps_expected": expected,
        "steps_persisted": steps_after,
        "accepted_steps_lost": max(0, expected - steps_after),
        "warm_up_answered": answered_before,
        "journal": stack.journal_state(),
    }


def _burst(
    stack: GatewayStack,
    *,
    seconds: float,
    concurrency: int,
    fault_at: float,
    fault,
) -> tuple[list, float, float]:
    """Runs the burst; `fault()` runs in a thread `fault_at` seconds in and returns when the fault is over."""
    window: dict[str, float] = {}

    def inject():
        time.sleep(fault_at)
        window["started"] = time.monotonic()
        fault()
        window["ended"] = time.monotonic()

    thread = threading.Thread(target=inject, daemon=True)
    thread.start()
    outcomes = asyncio.run(
        closed_loop(
            stack.url, stack.headers, lambda index: CHAT, concurrency=concurrency, seconds=seconds, timeout=30
        )
    )
    thread.join(timeout=300)
    return outcomes, window["started"], window["ended"]


def _warm_up(stack: GatewayStack) -> int:
    outcomes = asyncio.run(
        closed_loop(stack.url, stack.headers, lambda index: CHAT, concurrency=4, seconds=2)
    )
    return sum(outcome.ok for outcome in outcomes)


def scenario_postgres(upstream_url: str, args, log_dir: Path) -> dict:
    with GatewayStack(
        upstream_url, model=DEFAULT_MODEL, log_dir=log_dir / "postgres", pg_url=args.pg_url
    ) as stack:
        warm = _warm_up(stack)
        before = _drain(stack, warm, 60)
        outcomes, started, ended = _burst(
            stack,
            seconds=args.seconds,
            concurrency=args.concurrency,
            fault_at=args.fault_at,
            fault=lambda: _restart_postgres(args.pg_cluster),
        )
        answered = sum(outcome.ok for outcome in outcomes)
        after = _drain(stack, before + answered, args.drain_seconds)
        stack.stop_server()  # the lifespan shutdown flushes what the journal still holds
        after = _drain(stack, before + answered, 10)
        return _report("postgres restart", outcomes, started, ended, warm, before, after, stack)


def scenario_journal_full(upstream_url: str, args, log_dir: Path) -> dict:
    stack = GatewayStack(
        upstream_url, model=DEFAULT_MODEL, log_dir=log_dir / "journal-full", pg_url=args.pg_url
    )
    journal = stack.var_dir / "journal"
    mounted = False
    try:
        stack.setup()
        journal.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={args.journal_mib}m,mode=0700", "tmpfs", str(journal)],
            check=True,
            capture_output=True,
        )
        mounted = True
        stack.start_server()
        warm = _warm_up(stack)
        before = _drain(stack, warm, 60)

        def disk_full():
            filler = _fill(journal)
            time.sleep(args.fault_seconds)
            filler.unlink()

        outcomes, started, ended = _burst(
            stack, seconds=args.seconds, concurrency=args.concurrency, fault_at=args.fault_at, fault=disk_full
        )
        answered = sum(outcome.ok for outcome in outcomes)
        after = _drain(stack, before + answered, args.drain_seconds)
        stack.stop_server()
        after = _drain(stack, before + answered, 10)
        return _report("journal disk full", outcomes, started, ended, warm, before, after, stack)
    finally:
        stack.stop_server()
        if mounted:
            subprocess.run(["umount", "-l", str(journal)], check=False, capture_output=True)
        stack.close()


def _redis_start(port: int) -> None:
    """Starts a Redis server on `port` as this machine's services run (nothing kept on disk)."""
    subprocess.run(
        [
            "redis-server",
            "--daemonize",
            "yes",
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            "/tmp",
            "--logfile",
            f"/tmp/redis-{port}.log",
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    while (
        subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True).stdout.strip() != b"PONG"
    ):
        time.sleep(0.1)


def _restart_redis(port: int) -> None:
    subprocess.run(["redis-cli", "-p", str(port), "shutdown", "nosave"], capture_output=True, timeout=30)
    deadline = time.monotonic() + 30
    while subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True).returncode == 0:
        if time.monotonic() > deadline:
            raise RuntimeError("redis did not stop")
        time.sleep(0.1)
    _redis_start(port)


class RedisGatewayStack(GatewayStack):
    """The benchmark's gateway on Redis (cache, broker, channel layer: a database and prefixes of its own),
    with a Celery worker on the default and ingest queues."""

    def __init__(self, *args, redis_url: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.redis_url, self.worker = redis_url, None

    def env(self) -> dict:
        env = super().env()
        env.update(
            {
                "REDIS_URL": self.redis_url,
                "AREAL_CACHE_PREFIX": f"faults-{os.getpid()}",
                "AREAL_CHANNEL_PREFIX": f"faults-{os.getpid()}",
                # live sockets re-join their groups at each re-check (30 s by default): shorter here, so
                # the re-join after the restart falls within the burst
                "AREAL_LIVE_RECHECK_SECONDS": "5",
            }
        )
        return env

    def start_worker(self) -> None:
        command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "areal_web",
            "worker",
            "-Q",
            ",".join((Queue.DEFAULT, Queue.INGEST)),
            "--pool",
            "solo",
            "--without-gossip",
            "--without-mingle",
            "--loglevel",
            "WARNING",
        ]
        with open(self.log_dir / "worker.log", "wb") as log:
            self.worker = subprocess.Popen(
                command,
                cwd=REPO_ROOT,
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def admin_session(self) -> str:
        """Creates an admin member of the tenant (manage.py bootstrap) and signs in: the session cookie."""
        import httpx

        out = self._manage("bootstrap", "--tenant", "bench", "--username", "faults-admin")
        password = next(
            line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("password:")
        )
        with httpx.Client(base_url=self.url, trust_env=False) as client:
            client.get("/login/")
            client.post(
                "/login/",
                data={
                    "username": "faults-admin",
                    "password": password,
                    "csrfmiddlewaretoken": client.cookies["csrftoken"],
                },
            )
            return client.cookies["sessionid"]

    def qualification_gap(self) -> tuple[int, int]:
        """(rewarded trajectories, of which never qualified)."""
        self.count_steps()
        row = self._counter.execute(
            "SELECT count(DISTINCT r.trajectory_id), count(DISTINCT r.trajectory_id) FILTER (WHERE q.id IS NULL)"
            " FROM rewards_reward r LEFT JOIN qualification_qualification q ON q.trajectory_id = r.trajectory_id"
        ).fetchone()
        return row[0], row[1]

    def close(self) -> None:
        if self.worker is not None and self.worker.poll() is None:
            self.worker.terminate()
            try:
                self.worker.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.worker.kill()
        super().close()


async def _watch_live(url: str, session: str, until: float, events: list, closes: list) -> None:
    """A page on the tenant's live traffic stream; reconnects (once a second) when the socket closes."""
    import websockets

    uri = url.replace("http://", "ws://") + "/ws/live/bench/"
    while time.monotonic() < until:
        try:
            async with websockets.connect(
                uri, additional_headers={"Cookie": f"sessionid={session}", "Origin": url}, open_timeout=5
            ) as socket:
                await socket.send(json.dumps({"subscribe": "gateway.traffic"}))
                while time.monotonic() < until:
                    try:
                        message = await asyncio.wait_for(
                            socket.recv(), timeout=max(0.1, until - time.monotonic())
                        )
                    except TimeoutError:
                        break
                    if "payload" in json.loads(message):
                        events.append(time.monotonic())
        except (OSError, websockets.exceptions.WebSocketException) as error:
            closes.append((time.monotonic(), type(error).__name__))
            await asyncio.sleep(1)


def scenario_redis(upstream_url: str, args, log_dir: Path) -> dict:
    if subprocess.run(["redis-cli", "-p", str(args.redis_port), "ping"], capture_output=True).returncode != 0:
        _redis_start(args.redis_port)
    with RedisGatewayStack(
        upstream_url,
        model=DEFAULT_MODEL,
        log_dir=log_dir / "redis",
        pg_url=args.pg_url,
        redis_url=f"redis://127.0.0.1:{args.redis_port}/14",
    ) as stack:
        stack.start_worker()
        key = (
            stack._manage(
                "createapikey",
                "bench",
                "--scope",
                "inference",
                "--scope",
                "rewards:write",
                "--name",
                "faults",
            )
            .strip()
            .splitlines()[-1]
            .strip()
        )
        headers = {"Authorization": f"Bearer {key}"}
        session = stack.admin_session()
        warm = _warm_up(stack)
        before = _drain(stack, warm, 60)

        def call(index: int) -> Call:
            if index % 2 and index > 200:
                return Call(
                    "reward",
                    "POST",
                    "/v1/rewards",
                    body={"session_id": f"faults-{(index - 100) // 2}", "value": 1.0},
                )
            return Call(
                "chat",
                "POST",
                "/v1/chat/completions",
                body=CHAT.body,
                headers={"X-Session-Id": f"faults-{index // 2}"},
            )

        window: dict[str, float] = {}
        events: list[float] = []
        closes: list = []

        async def burst():
            until = time.monotonic() + args.seconds + 10

            async def inject():
                await asyncio.sleep(args.fault_at)
                window["started"] = time.monotonic()
                await asyncio.to_thread(_restart_redis, args.redis_port)
                window["ended"] = time.monotonic()

            results = await asyncio.gather(
                closed_loop(stack.url, headers, call, concurrency=args.concurrency, seconds=args.seconds),
                _watch_live(stack.url, session, until, events, closes),
                inject(),
            )
            return results[0]

        outcomes = asyncio.run(burst())
        answered = sum(outcome.ok for outcome in outcomes if outcome.kind == "chat")
        after = _drain(stack, before + answered, args.drain_seconds)
        time.sleep(args.qualify_seconds)
        rewarded, unqualified = stack.qualification_gap()
        stack.stop_server()
        after = _drain(stack, before + answered, 10)
        result = _report(
            "redis restart", outcomes, window["started"], window["ended"], warm, before, after, stack
        )
        rewards = [outcome for outcome in outcomes if outcome.kind == "reward"]
        live_after = [at for at in events if at > window["ended"]]
        result.update(
            {
                "reward_statuses": statuses(rewards),
                "rewarded_trajectories": rewarded,
                "rewarded_never_qualified": unqualified,
                "live_points_before_fault": sum(1 for at in events if at < window["started"]),
                "live_points_after_fault": len(live_after),
                "first_live_point_after_fault_s": round(live_after[0] - window["ended"], 2)
                if live_after
                else None,
                "websocket_closes": len(closes),
            }
        )
        return result


SCENARIOS = {"postgres": scenario_postgres, "journal-full": scenario_journal_full, "redis": scenario_redis}


def print_table(results: list[dict]) -> None:
    columns = [
        ("scenario", "scenario"),
        ("requests", "requests"),
        ("answered_200", "200"),
        ("statuses_during_fault", "answers during the fault"),
        ("fault_seconds", "fault s"),
        ("recovered_seconds", "first 200 after s"),
        ("accepted_steps_lost", "accepted steps lost"),
    ]
    print("| " + " | ".join(title for _, title in columns) + " |")
    print("|" + "---|" * len(columns))
    for result in results:
        cells = [
            json.dumps(result[key]) if isinstance(result[key], dict) else str(result[key])
            for key, _ in columns
        ]
        print("| " + " | ".join(cells) + " |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenario", choices=[*SCENARIOS, "all"], default="all")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each burst")
    parser.add_argument("--fault-at", type=float, default=5.0, help="seconds into the burst")
    parser.add_argument(
        "--fault-seconds", type=float, default=4.0, help="how long the journal's disk stays full"
    )
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--drain-seconds", type=float, default=120.0)
    parser.add_argument("--journal-mib", type=int, default=64, help="size of the journal's tmpfs")
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL, help="the PostgreSQL server the gateway uses")
    parser.add_argument("--pg-cluster", default="main", help="its cluster name, for pg_ctlcluster restart")
    parser.add_argument(
        "--redis-port",
        type=int,
        default=6379,
        help="the local Redis server to use and restart (started if none answers there)",
    )
    parser.add_argument(
        "--qualify-seconds",
        type=float,
        default=20.0,
        help="how long the worker gets to qualify rewarded trajectories after the drain",
    )
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("faults needs root (it restarts PostgreSQL and mounts a tmpfs)", file=sys.stderr)
        return 2
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    log_dir = RESULTS_DIR / f"faults-{stamp}"
    names = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    results = []
    with running_upstream(free_port(), log=None) as (upstream_url, _):
        for name in names:
            print(f"scenario {name} ...", flush=True)
            results.append(SCENARIOS[name](upstream_url, args, log_dir))
            print(json.dumps(results[-1], indent=2), flush=True)
    print_table(results)
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / "results.json").write_text(json.dumps(results, indent=2))
    return 0 if all(result["accepted_steps_lost"] == 0 for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
