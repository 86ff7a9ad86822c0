"""The stack's processes, launched the same way by `manage.py up` and by the demo (`python -m demo`).

What each process runs (web under uvicorn, a Celery worker, Celery beat, an embedded inference server), the
environment they share and each inference server's own, the check that their ports are free, and a group that
starts each in a session of its own, tells when one of them has exited, and stops them together (SIGTERM to
each process group, SIGKILL past the grace period).
"""

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from django.conf import settings
from django.core.management.base import CommandError

from areal_web.queues import Queue

DEFAULT_MODEL_DIR = "models/default"  # under the var directory: the model `up`'s inference server serves
STOP_GRACE_SECONDS = 15


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def ports_refuse_busy(host: str, ports: Mapping[str, int]) -> None:
    """Raises CommandError for the first port of `ports` (what moves it → the port; 0: none wanted) that
    something on `host` already holds."""
    for name, wanted in ports.items():
        if wanted and not port_is_free(host, wanted):
            raise CommandError(
                f"port {wanted} on {host} is already in use; stop what holds it or set {name}=<free port>"
            )


def web_command(*, host: str, port: int, log_level: str | None = None) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "uvicorn",
        "areal_web.asgi:application",
        "--host",
        host,
        "--port",
        str(port),
        "--no-access-log",
    ]
    return [*command, "--log-level", log_level] if log_level else command


def worker_command(*, queues: Iterable[Queue], concurrency: int, log_level: str, node: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "areal_web",
        "worker",
        "-Q",
        ",".join(queue.value for queue in queues),
        "--concurrency",
        str(concurrency),
        "--loglevel",
        log_level,
        "-n",
        node,
    ]


def beat_command(*, log_level: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "areal_web",
        "beat",
        "--loglevel",
        log_level,
        "-s",
        str(settings.CELERY_BEAT_SCHEDULE_FILENAME),
    ]


def inference_command(
    *, model: str, host: str, port: int, served_model_name: str, model_version: int | None = None
) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "workers.inference.server",
        "--model",
        model,
        "--host",
        host,
        "--port",
        str(port),
        "--served-model-name",
        served_model_name,
    ]
    return command if model_version is None else [*command, "--model-version", str(model_version)]


def launch_environment(**overrides: str) -> dict[str, str]:
    """The environment of the processes launched from this one: a copy of its own (what it was started with
    passes on to them; settings are read through areal_web.env, this only copies), `overrides` over it, and
    the local settings unless DJANGO_SETTINGS_MODULE names others."""
    environment = {**os.environ, **overrides}
    environment.setdefault("DJANGO_SETTINGS_MODULE", "areal_web.settings.local")
    return environment


def stack_environment(environment: dict, *, host: str, inference_ports) -> dict:
    """`environment` plus what the stack's processes share about the embedded inference servers: when they listen
    where the backend allow-list does not reach (--inference-port, HOST), their addresses added to it, here and for
    the processes started (AREAL_BACKEND_ALLOWED_HOSTS). Each server's admin token goes to that server alone
    (`inference_server_environment`)."""
    from apps.inference.egress import BackendAddressRefused, backend_url_check

    bracketed = f"[{host}]" if ":" in host else host
    missing = []
    for port in inference_ports:
        try:
            backend_url_check(f"http://{bracketed}:{port}")
        except BackendAddressRefused:
            missing.append(f"{bracketed}:{port}")
    if missing:
        settings.AREAL_BACKEND_ALLOWED_HOSTS = [*settings.AREAL_BACKEND_ALLOWED_HOSTS, *missing]
        environment["AREAL_BACKEND_ALLOWED_HOSTS"] = ",".join(settings.AREAL_BACKEND_ALLOWED_HOSTS)
    return environment


def inference_server_environment(environment: dict, *, url: str, model_store=()) -> dict:
    """The environment of the embedded inference server at `url`: its own admin token (it refuses every admin
    call without it; publication sends it) and its model store, the folders /admin/load may load from: the one
    trained versions are exported to (AREAL_MODELS_DIR) and `model_store`."""
    from apps.inference.admin_tokens import inference_admin_token

    folders = dict.fromkeys(str(folder) for folder in (settings.AREAL_MODELS_DIR, *model_store))
    return {
        **environment,
        "AREAL_INFERENCE_ADMIN_TOKEN": inference_admin_token(url),
        "AREAL_INFERENCE_MODEL_STORE": os.pathsep.join(folders),
    }


def http_wait(
    urls: Sequence[str], *, ready: Callable[[int], bool], timeout: float, keep_waiting: Callable[[], bool]
) -> bool:
    """True as soon as one of `urls` answers with a status `ready` accepts; False past `timeout`, or once
    `keep_waiting` says no (the process that should answer has exited, the run is stopping)."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and keep_waiting():
        for url in urls:
            try:
                if ready(httpx.get(url, timeout=2).status_code):
                    return True
            except httpx.HTTPError:
                pass
        time.sleep(0.5)
    return False


class ProcessGroup:
    """Named processes, each started in a session of its own so that a stop reaches what it starts in turn."""

    def __init__(self) -> None:
        self.processes: dict[str, subprocess.Popen] = {}

    def __bool__(self) -> bool:
        return bool(self.processes)

    def __getitem__(self, name: str) -> subprocess.Popen:
        return self.processes[name]

    def start(
        self, name: str, command: list[str], *, environment: Mapping[str, str], log: Path | None = None
    ) -> subprocess.Popen:
        """Starts `command` as `name`; with `log`, its output is appended to that file instead of this one's."""
        if log is None:
            process = subprocess.Popen(command, env=environment, start_new_session=True)
        else:
            with open(log, "ab") as output:  # the child holds its own copy
                process = subprocess.Popen(
                    command, env=environment, start_new_session=True, stdout=output, stderr=subprocess.STDOUT
                )
        self.processes[name] = process
        return process

    def exited(self) -> dict[str, int]:
        """The processes that have exited, by name, with their exit codes."""
        return {
            name: process.returncode for name, process in self.processes.items() if process.poll() is not None
        }

    def alive(self) -> bool:
        return not self.exited()

    def stop(self, grace_seconds: float = STOP_GRACE_SECONDS) -> None:
        """SIGTERM to every process group still running, then SIGKILL to those still there after `grace_seconds`."""
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_seconds
        for process in self.processes.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
