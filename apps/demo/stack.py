"""The demo's stack: var/demo reset and the re-exec into it, then the processes it runs (web, a service worker,
a train worker, beat and two embedded inference servers serving slots A and B), their readiness and their stop.
"""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

from apps.core.management.commands.up import inference_server_environment, port_is_free, stack_environment
from apps.demo.settings import DEMO_DIR_MARKER, TENANT, DemoSettings
from areal_web.queues import Queue


def refuse_busy_ports(host: str, *, port: int, inference_port: int) -> None:
    for name, wanted in (
        ("PORT", port),
        ("AREAL_INFERENCE_PORT", inference_port),
        ("AREAL_INFERENCE_PORT (+1: serving slot B)", inference_port + 1),
    ):
        if not port_is_free(host, wanted):
            raise CommandError(
                f"port {wanted} on {host} is already in use; stop what holds it or set {name}=<free port>"
            )


def reset_and_reexec(demo_settings: DemoSettings, *, out) -> None:
    """Settings are read at import: resets the demo's directory (unless DEMO_KEEP=1) and runs `manage.py demo`
    again with AREAL_VAR_DIR pointing there. Refuses to remove a directory the demo did not make."""
    demo_dir = demo_settings.var_dir
    if demo_dir.exists() and not demo_settings.keep:
        if (demo_dir / DEMO_DIR_MARKER).exists() or not any(demo_dir.iterdir()):
            out.write(f"resetting {demo_dir} (DEMO_KEEP=1 keeps it)")
            shutil.rmtree(demo_dir)
        else:
            raise CommandError(
                f"{demo_dir} exists and is not a demo directory; remove it or set DEMO_VAR_DIR"
            )
    demo_dir.mkdir(parents=True, exist_ok=True)
    (demo_dir / DEMO_DIR_MARKER).touch()
    environment = {
        **os.environ,
        "AREAL_VAR_DIR": str(demo_dir),
        "DEMO_VAR_DIR": str(demo_dir),
        "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "areal_web.settings.local"),
    }
    environment.setdefault("AREAL_RELEASE_ANALYSIS_SECONDS", "3")  # canary ticks: seconds, not a minute
    environment.setdefault("AREAL_ANNOTATION_FILL_SECONDS", "5")
    # The demo ticks the control plane itself, every second, in its own process (apps/demo/README.md): the
    # beat's tick is off, so that two ticks never race over the one SQLite database.
    environment["AREAL_EVOLUTION_TICK_SECONDS"] = "0"
    environment.pop("AREAL_TRAINING_DIR", None)
    environment.pop("AREAL_MODELS_DIR", None)
    manage = Path(settings.BASE_DIR) / "manage.py"
    os.execve(sys.executable, [sys.executable, str(manage), "demo", *sys.argv[2:]], environment)


class StackMixin:
    """Part of apps.demo.run.Demo (whose __init__ declares the state): starts the stack's `processes`, registers
    the two inference servers as the tenant's backends, waits for them, and stops them."""

    def _start_stack(self, base) -> None:
        python = sys.executable
        environment = stack_environment(
            {**os.environ, "AREAL_GATEWAY_URL": self.url}, host=self.host, inference_ports=self.slots.values()
        )
        service_queues = ",".join(queue.value for queue in Queue if queue != Queue.TRAIN)
        commands = {
            "web": [
                python,
                "-m",
                "uvicorn",
                "areal_web.asgi:application",
                "--host",
                self.host,
                "--port",
                str(self.port),
                "--no-access-log",
                "--log-level",
                "warning",
            ],
            "worker": [
                python,
                "-m",
                "celery",
                "-A",
                "areal_web",
                "worker",
                "-Q",
                service_queues,
                "--concurrency",
                "2",
                "--loglevel",
                "WARNING",
                "-n",
                "demo@%h",
            ],
            "trainer": [
                python,
                "-m",
                "celery",
                "-A",
                "areal_web",
                "worker",
                "-Q",
                Queue.TRAIN.value,
                "--concurrency",
                "1",
                "--loglevel",
                "WARNING",
                "-n",
                "demo-train@%h",
            ],
            "beat": [
                python,
                "-m",
                "celery",
                "-A",
                "areal_web",
                "beat",
                "--loglevel",
                "WARNING",
                "-s",
                str(settings.CELERY_BEAT_SCHEDULE_FILENAME),
            ],
        }
        for slot, port in self.slots.items():
            commands[f"inference-{slot}"] = [
                python,
                "-m",
                "workers.inference.server",
                "--model",
                base.checkpoint_path,
                "--host",
                self.host,
                "--port",
                str(port),
                "--served-model-name",
                self.model,
                "--model-version",
                str(base.number),
            ]
        logs = Path(settings.VAR_DIR) / "logs"
        logs.mkdir(exist_ok=True)
        environments = {  # each inference server gets its own admin token and the folders it may load from
            f"inference-{slot}": inference_server_environment(
                environment, url=f"http://{self.host}:{port}", model_store=[self.run_dir]
            )
            for slot, port in self.slots.items()
        }
        for name, command in commands.items():
            log = open(logs / f"{name}.log", "ab")  # noqa: SIM115  (closed with the process)
            self.processes[name] = subprocess.Popen(
                command,
                env=environments.get(name, environment),
                start_new_session=True,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self._say(
            f"started web, worker, trainer, beat and two embedded inference servers (serving slots A and "
            f"B; logs: {logs})"
        )
        from apps.audit.services import Actor
        from apps.inference.models import InferenceBackend
        from apps.releases.services import routing_initialize

        for slot, port in self.slots.items():
            self._wait_http(f"http://{self.host}:{port}/health", f"inference server {slot.upper()}")
            call_command(
                "registerbackend",
                TENANT,
                name=f"embedded-{self.model}-{slot}",
                url=f"http://{self.host}:{port}",
                kind="embedded",
                model=self.model,
                model_version=str(base.number),
                stdout=open(os.devnull, "w"),  # noqa: SIM115 (the server process keeps it)
            )
        backends = InferenceBackend.objects.for_tenant(self.tenant)
        self.backends = {slot: backends.get(name=f"embedded-{self.model}-{slot}") for slot in self.slots}
        routing_initialize(
            tenant=self.tenant, actor=Actor.system("demo"), version=base, reason="demo: the base serves"
        )
        self._wait_http(f"{self.url}/health", "web", fallback=f"{self.url}/")
        credentials = Path(settings.VAR_DIR) / "first-start-credentials.txt"
        login = credentials.read_text().strip().replace("\n", ", ") if credentials.exists() else "admin"
        self.out.write(self.style.SUCCESS(f"console: {self.url}/  login: {login}"))

    def _wait_http(self, url: str, what: str, *, fallback: str | None = None, timeout: float = 180) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.stopping.is_set():
            for candidate in filter(None, (url, fallback)):
                try:
                    if httpx.get(candidate, timeout=2).status_code < 500:
                        return
                except httpx.HTTPError:
                    pass
            if not self._alive():
                raise CommandError(f"a process stopped while waiting for the {what}; see var/demo/logs")
            time.sleep(0.5)
        if not self.stopping.is_set():
            raise CommandError(f"the {what} did not answer at {url}")

    def _alive(self) -> bool:
        return all(process.poll() is None for process in self.processes.values())

    def _shutdown(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for process in self.processes.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        if self.processes:
            self.out.write("stopped every process of the demo")
