"""The demo's stack: var/demo reset and the re-exec into it, then the processes it runs (web, a service worker,
a train worker, beat and two embedded inference servers serving slots A and B), their readiness and their stop;
launched by areal_web.processes, as `manage.py up`'s are.
"""

import os
import shutil
import sys
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

from areal_web.processes import (
    ProcessGroup,
    beat_command,
    http_wait,
    inference_command,
    inference_server_environment,
    launch_environment,
    ports_refuse_busy,
    stack_environment,
    web_command,
    worker_command,
)
from areal_web.queues import Queue
from demo.config import DEMO_DIR_MARKER, TENANT, DemoConfig


def refuse_busy_ports(host: str, *, port: int, inference_port: int) -> None:
    ports_refuse_busy(
        host,
        {
            "PORT": port,
            "AREAL_INFERENCE_PORT": inference_port,
            "AREAL_INFERENCE_PORT (+1: serving slot B)": inference_port + 1,
        },
    )


def reset_and_reexec(demo_config: DemoConfig, argv: list[str], *, out) -> None:
    """Settings are read at import: resets the demo's directory (unless DEMO_KEEP=1) and runs `python -m demo`
    again (with `argv`) with AREAL_VAR_DIR pointing there. Refuses to remove a directory the demo did not make."""
    demo_dir = demo_config.var_dir
    if demo_dir.exists() and not demo_config.keep:
        if (demo_dir / DEMO_DIR_MARKER).exists() or not any(demo_dir.iterdir()):
            out.write(f"resetting {demo_dir} (DEMO_KEEP=1 keeps it)")
            shutil.rmtree(demo_dir)
        else:
            raise CommandError(
                f"{demo_dir} exists and is not a demo directory; remove it or set DEMO_VAR_DIR"
            )
    demo_dir.mkdir(parents=True, exist_ok=True)
    (demo_dir / DEMO_DIR_MARKER).touch()
    environment = launch_environment(AREAL_VAR_DIR=str(demo_dir), DEMO_VAR_DIR=str(demo_dir))
    environment.setdefault("AREAL_RELEASE_ANALYSIS_SECONDS", "3")  # canary ticks: seconds, not a minute
    environment.setdefault("AREAL_ANNOTATION_FILL_SECONDS", "5")
    # The demo ticks the control plane itself, every second, in its own process (demo/README.md): the
    # beat's tick is off, so that two ticks never race over the one SQLite database.
    environment["AREAL_EVOLUTION_TICK_SECONDS"] = "0"
    environment.pop("AREAL_TRAINING_DIR", None)
    environment.pop("AREAL_MODELS_DIR", None)
    os.execve(sys.executable, [sys.executable, "-m", "demo", *argv], environment)


class StackMixin:
    """Part of demo.run.Demo (whose __init__ declares the state): starts the stack's `processes`, registers
    the two inference servers as the tenant's backends, waits for them, and stops them."""

    processes: ProcessGroup

    def _start_stack(self, base) -> None:
        environment = stack_environment(
            launch_environment(  # the trainer reads the niceness, the eval worker the gate's threads
                AREAL_GATEWAY_URL=self.url,
                AREAL_TRAINING_NICENESS=str(self.demo_config.trainer_niceness),
                AREAL_GATE_THREADS=str(self.demo_config.gate_threads),
            ),
            host=self.host,
            inference_ports=self.slots.values(),
        )
        commands = {
            "web": web_command(host=self.host, port=self.port, log_level="warning"),
            "worker": worker_command(
                queues=[queue for queue in Queue if queue != Queue.TRAIN],
                concurrency=2,
                log_level="WARNING",
                node="demo@%h",
            ),
            "trainer": worker_command(
                queues=[Queue.TRAIN], concurrency=1, log_level="WARNING", node="demo-train@%h"
            ),
            "beat": beat_command(log_level="WARNING"),
        }
        for slot, port in self.slots.items():
            commands[f"inference-{slot}"] = inference_command(
                model=base.checkpoint_path,
                host=self.host,
                port=port,
                served_model_name=self.model,
                model_version=base.number,
            )
        logs = Path(settings.VAR_DIR) / "logs"
        logs.mkdir(exist_ok=True)
        environments = {  # each inference server gets its own admin token and the folders it may load from
            f"inference-{slot}": inference_server_environment(
                environment, url=f"http://{self.host}:{port}", model_store=[self.run_dir]
            )
            for slot, port in self.slots.items()
        }
        for name, command in commands.items():
            self.processes.start(
                name, command, environment=environments.get(name, environment), log=logs / f"{name}.log"
            )
        self._say(
            f"started web, worker, trainer, beat and two embedded inference servers (serving slots A and "
            f"B; logs: {logs})"
        )
        from apps.audit.services import Actor
        from apps.inference.models import InferenceBackend
        from apps.releases.routing_writes import routing_initialize

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
        answered = http_wait(
            [candidate for candidate in (url, fallback) if candidate],
            ready=lambda status: status < 500,
            timeout=timeout,
            keep_waiting=lambda: not self.stopping.is_set() and self._alive(),
        )
        if answered or self.stopping.is_set():
            return
        if not self._alive():
            raise CommandError(f"a process stopped while waiting for the {what}; see var/demo/logs")
        raise CommandError(f"the {what} did not answer at {url}")

    def _alive(self) -> bool:
        return self.processes.alive()

    def _shutdown(self) -> None:
        self.processes.stop()
        if self.processes:
            self.out.write("stopped every process of the demo")
