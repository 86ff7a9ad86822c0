"""The LiteLLM proxy as the gateway benchmark's peer, started from `.venv-litellm`
(built by `scripts/litellm_venv.sh`).

It runs **without a database**: with `DATABASE_URL` set LiteLLM needs Prisma engine binaries fetched from
a host this machine cannot reach, and does not start. Without one it authenticates against the
`master_key` in its config and writes no spend logs, i.e. it records far less per request than the
areal-web gateway, which persists every step: the comparison is harsh on us.

    with LiteLLMProxy(upstream_url="http://127.0.0.1:18080") as proxy:
        proxy.chat_url, proxy.headers
"""

import contextlib
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from bench.gateway.upstream import DEFAULT_MODEL, free_port, stop_process, wait_http_ready

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_VENV = REPO_ROOT / ".venv-litellm"
MASTER_KEY = "sk-bench-litellm-master"
UPSTREAM_KEY = "sk-bench-upstream"  # the upstream ignores it; LiteLLM's openai route wants one

# Environment LiteLLM must not see: a database or cache it would try to reach, proxies that would take
# its calls to 127.0.0.1 elsewhere.
_DROPPED_ENV = (
    "DATABASE_URL",
    "DIRECT_URL",
    "REDIS_URL",
    "REDIS_HOST",
    "REDIS_PORT",
    "REDIS_PASSWORD",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)


def litellm_config(upstream_url: str, model: str = DEFAULT_MODEL, master_key: str = MASTER_KEY) -> dict:
    """One model, `openai/<model>` at the upstream; no database, no callbacks, no verbose logging."""
    return {
        "model_list": [
            {
                "model_name": model,
                "litellm_params": {
                    "model": f"openai/{model}",
                    "api_base": upstream_url.rstrip("/") + "/v1",
                    "api_key": UPSTREAM_KEY,
                },
            }
        ],
        "litellm_settings": {"drop_params": True, "set_verbose": False},
        "general_settings": {"master_key": master_key},
    }


def litellm_version(venv: Path = DEFAULT_VENV) -> str | None:
    try:
        return subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-c",
                "from importlib.metadata import version; print(version('litellm'))",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


class LiteLLMProxy:
    """`litellm --config ... --port P` as a subprocess: a context manager that waits until it answers,
    captures its log, and stops its whole process group on exit."""

    def __init__(
        self,
        upstream_url: str,
        *,
        model: str = DEFAULT_MODEL,
        port: int | None = None,
        host: str = "127.0.0.1",
        workers: int = 1,
        venv: Path = DEFAULT_VENV,
        workdir: Path | None = None,
        startup_timeout: float = 180.0,
    ):
        self.upstream_url, self.model, self.host = upstream_url, model, host
        self.port = port or free_port(host)
        self.workers, self.venv, self.startup_timeout = workers, Path(venv), startup_timeout
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="bench-litellm-"))
        self.config_path = self.workdir / "config.yaml"
        self.log_path = self.workdir / "litellm.log"
        self.process: subprocess.Popen | None = None
        self.startup_seconds: float | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def chat_url(self) -> str:
        return self.url + "/v1/chat/completions"

    @property
    def headers(self) -> dict:
        return {"Authorization": f"Bearer {MASTER_KEY}"}

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def start(self) -> "LiteLLMProxy":
        executable = self.venv / "bin" / "litellm"
        if not executable.exists():
            raise FileNotFoundError(f"{executable} is missing: run scripts/litellm_venv.sh first")
        self.workdir.mkdir(parents=True, exist_ok=True)
        # JSON is YAML: LiteLLM reads this with yaml.safe_load, and we need no YAML writer.
        self.config_path.write_text(json.dumps(litellm_config(self.upstream_url, self.model), indent=2))
        env = {key: value for key, value in os.environ.items() if key not in _DROPPED_ENV}
        env.update(
            {
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # else start-up waits on a download that cannot succeed
                "LITELLM_MODE": "PRODUCTION",  # do not read a .env file
                "LITELLM_LOG": "ERROR",
                "NO_PROXY": "127.0.0.1,localhost",
                "PATH": f"{self.venv / 'bin'}:{env.get('PATH', '')}",
            }
        )
        command = [
            str(executable),
            "--config",
            str(self.config_path),
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--num_workers",
            str(self.workers),
        ]
        started = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                command,
                cwd=self.workdir,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            wait_http_ready(
                self.url + "/health/liveliness", self.process, self.startup_timeout, self.log_path
            )
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)

    def cleanup(self) -> None:
        if self._own_workdir:
            for path in (self.config_path, self.log_path):
                path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                self.workdir.rmdir()

    def __enter__(self) -> "LiteLLMProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
