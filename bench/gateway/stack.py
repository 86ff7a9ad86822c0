"""The areal-web gateway for the benchmark, set up from nothing against PostgreSQL and torn down after.

`GatewayStack` (a context manager) does, in order:

1. creates a fresh PostgreSQL database (`areal_bench_<pid>` on the server of `--pg-url`, default
   `postgres://postgres@127.0.0.1:5432`, trust auth) and runs the migrations into it with `DATABASE_URL`
   set (settings `areal_web.settings.local`, `DJANGO_DEBUG=false`, the shell's `REDIS_URL` removed: the file
   cache, the SQLite shared state and the in-memory channel layer under a temporary `AREAL_VAR_DIR`, so the
   journal and cache of this run are its own; with `redis_url` (`--redis-url`) those live on that Redis
   instead, under key prefixes of this run);
2. creates a tenant (default policy: capture fully on, no rate limit, no budget), an API key with the
   `inference` scope (`createapikey` prints it alone on its last line) and an `openai_compatible` backend
   pointing at the benchmark's upstream for the benchmark's model;
3. starts `uvicorn areal_web.asgi:application` as a subprocess in its own process group and waits until
   `/v1/models` answers 200 with the key;
4. on exit: SIGTERM to the gateway (uvicorn's lifespan shutdown flushes the journal), counts the steps in
   PostgreSQL, inspects the journal files left behind, and drops the database (unless `keep_database`).

`count_steps()` may be called at any time to count the steps the gateway has persisted so far.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

from bench.gateway.upstream import free_port, wait_http_ready

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PG_URL = "postgres://postgres@127.0.0.1:5432"
SETTINGS_MODULE = "areal_web.settings.local"
TENANT_SLUG = "bench"
BACKEND_NAME = "bench"

# The gateway process must not inherit services of the shell the benchmark runs in.
_DROPPED_ENV = (
    "REDIS_URL",
    "DATABASE_URL",
    "AREAL_VAR_DIR",
    "DJANGO_SETTINGS_MODULE",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)


def _database_url(server_url: str, name: str) -> str:
    parts = urlsplit(server_url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, "", ""))


def _connect(server_url: str, dbname: str):
    parts = urlsplit(server_url)
    return psycopg.connect(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 5432,
        user=parts.username or "postgres",
        password=parts.password or None,
        dbname=dbname,
        autocommit=True,
        connect_timeout=10,
    )


class GatewayStack:
    def __init__(
        self,
        upstream_url: str,
        *,
        model: str,
        pg_url: str = DEFAULT_PG_URL,
        workers: int = 1,
        host: str = "127.0.0.1",
        port: int | None = None,
        keep_database: bool = False,
        log_dir: Path | None = None,
        stop_grace: float = 30.0,
        redis_url: str = "",
    ):
        self.upstream_url, self.model, self.pg_url = upstream_url.rstrip("/"), model, pg_url
        self.workers, self.host, self.port = workers, host, port or free_port(host)
        self.keep_database, self.stop_grace = keep_database, stop_grace
        self.redis_url = redis_url  # empty: the embedded default (file cache, SQLite shared state)
        self.db_name = f"areal_bench_{os.getpid()}"
        self.database_url = _database_url(pg_url, self.db_name)
        self.var_dir = Path(tempfile.mkdtemp(prefix="areal-bench-var-"))
        self.log_dir = Path(log_dir) if log_dir else self.var_dir
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.log_dir / "gateway.log"
        self.setup_log_path = self.log_dir / "gateway-setup.log"
        self.process: subprocess.Popen | None = None
        self.key: str | None = None
        self.timings: dict[str, float] = {}
        self.shutdown: dict = {}
        self._created = False
        self._counter = None  # a psycopg connection to the bench database

    # -- properties ----------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def chat_url(self) -> str:
        return self.url + "/v1/chat/completions"

    @property
    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.key}"}

    def env(self) -> dict:
        env = {key: value for key, value in os.environ.items() if key not in _DROPPED_ENV}
        env.update(
            {
                "DJANGO_SETTINGS_MODULE": SETTINGS_MODULE,
                "DATABASE_URL": self.database_url,
                "AREAL_VAR_DIR": str(self.var_dir),
                "DJANGO_DEBUG": "false",  # DEBUG keeps every SQL query in memory: not what a deployment runs
                "AREAL_LOG_LEVEL": "WARNING",
                "NO_PROXY": "127.0.0.1,localhost",
                "PYTHONUNBUFFERED": "1",
                # The upstream listens on a loopback port of its own: the operator lists it (apps/inference/egress.py).
                "AREAL_BACKEND_ALLOWED_HOSTS": urlsplit(self.upstream_url).netloc,
            }
        )
        if self.redis_url:  # as production runs it: cache, shared session state, broker and layer on Redis
            prefix = f"areal-bench-{os.getpid()}"
            env.update(
                {
                    "REDIS_URL": self.redis_url,
                    "AREAL_CACHE_PREFIX": prefix,
                    "AREAL_CHANNEL_PREFIX": prefix,
                    "AREAL_BROKER_PREFIX": prefix + ":",
                }
            )
        return env

    # -- set-up --------------------------------------------------------------------------------------
    def _manage(self, *args: str) -> str:
        command = [sys.executable, "manage.py", *args]
        result = subprocess.run(
            command, cwd=REPO_ROOT, env=self.env(), capture_output=True, text=True, timeout=600
        )
        with open(self.setup_log_path, "a") as log:
            log.write(f"$ manage.py {' '.join(args)}\n{result.stdout}{result.stderr}\n")
        if result.returncode != 0:
            raise RuntimeError(
                f"manage.py {' '.join(args)} failed ({result.returncode}):\n"
                f"{(result.stdout + result.stderr)[-3000:]}"
            )
        return result.stdout

    def create_database(self) -> None:
        with _connect(self.pg_url, "postgres") as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')
            connection.execute(f'CREATE DATABASE "{self.db_name}"')
        self._created = True

    def drop_database(self) -> None:
        if not self._created:
            return
        if self._counter is not None:
            self._counter.close()
            self._counter = None
        with _connect(self.pg_url, "postgres") as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')
        self._created = False

    def setup(self) -> None:
        started = time.monotonic()
        self.create_database()
        self._manage("migrate", "--noinput")
        self.timings["migrate_s"] = time.monotonic() - started
        self._manage("createtenant", TENANT_SLUG, "--name", "Benchmark")
        self.key = (
            self._manage("createapikey", TENANT_SLUG, "--scope", "inference", "--name", "bench")
            .strip()
            .splitlines()[-1]
            .strip()
        )
        out = self._manage(
            "registerbackend",
            TENANT_SLUG,
            "--name",
            BACKEND_NAME,
            "--url",
            self.upstream_url,
            "--kind",
            "openai_compatible",
            "--model",
            self.model,
        )
        if ": up" not in out.lower():
            raise RuntimeError(f"the bench backend is not up after registration: {out.strip()}")
        self.timings["setup_s"] = time.monotonic() - started

    def start_server(self) -> None:
        command = [
            sys.executable,
            "-m",
            "uvicorn",
            "areal_web.asgi:application",
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--lifespan",
            "on",
            "--no-access-log",
            "--log-level",
            "warning",
            "--timeout-graceful-shutdown",
            str(int(self.stop_grace)),
        ]
        if self.workers > 1:
            command += ["--workers", str(self.workers)]
        started = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                command,
                cwd=REPO_ROOT,
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_http_ready(self.url + "/v1/models", self.process, 120.0, self.log_path, headers=self.headers)
        self.timings["startup_s"] = time.monotonic() - started

    # -- counting ------------------------------------------------------------------------------------
    def count_steps(self) -> int:
        if self._counter is None or self._counter.closed:
            self._counter = _connect(self.pg_url, self.db_name)
        return self._counter.execute("SELECT count(*) FROM trajectories_step").fetchone()[0]

    def step_summary(self) -> dict:
        self.count_steps()
        row = self._counter.execute(
            "SELECT count(*), count(*) FILTER (WHERE error = '' AND NOT aborted),"
            " count(*) FILTER (WHERE completion_ids IS NOT NULL AND prompt_ids IS NOT NULL"
            "   AND completion_logprobs IS NOT NULL),"
            " count(DISTINCT trajectory_id) FROM trajectories_step"
        ).fetchone()
        return {"steps": row[0], "steps_ok": row[1], "steps_with_token_data": row[2], "trajectories": row[3]}

    def wait_for_steps(self, target: int, timeout: float = 60.0) -> tuple[int, float]:
        """Polls until at least `target` steps are persisted (or `timeout`); returns (count, when)."""
        deadline = time.monotonic() + timeout
        while True:
            count = self.count_steps()
            now = time.monotonic()
            if count >= target or now >= deadline:
                return count, now
            time.sleep(0.02)

    def journal_state(self) -> dict:
        """Journal files left in this run's var dir: bytes written vs bytes marked committed."""
        state = {"files": 0, "bytes": 0, "committed_bytes": 0}
        for path in (self.var_dir / "journal").glob("journal-*.jsonl"):
            marker = path.with_suffix(".committed")
            state["files"] += 1
            state["bytes"] += path.stat().st_size
            state["committed_bytes"] += int(marker.read_text() or 0) if marker.exists() else 0
        state["uncommitted_bytes"] = state["bytes"] - state["committed_bytes"]
        return state

    # -- tear-down -----------------------------------------------------------------------------------
    def stop_server(self) -> None:
        """SIGTERM (uvicorn finishes requests, then the lifespan shutdown flushes the journal); SIGKILL
        only if it has not exited after the grace period. Records how it ended."""
        if self.process is None or self.process.poll() is not None:
            return
        started = time.monotonic()
        how = "SIGTERM"
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=self.stop_grace + 10)
        except subprocess.TimeoutExpired:
            how = "SIGKILL after SIGTERM timed out"
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        except ProcessLookupError:
            pass
        self.shutdown = {
            "how": how,
            "returncode": self.process.returncode,
            "seconds": time.monotonic() - started,
        }

    def __enter__(self) -> "GatewayStack":
        try:
            self.setup()
            self.start_server()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        try:
            self.stop_server()
        finally:
            try:
                if not self.keep_database:
                    self.drop_database()
            finally:
                if self._counter is not None:
                    self._counter.close()
                shutil.rmtree(self.var_dir, ignore_errors=True)

    def __exit__(self, *exc) -> None:
        self.close()
