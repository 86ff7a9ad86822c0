"""Starts the whole stack in the foreground: web (uvicorn, ASGI), a Celery worker, Celery beat and the
embedded inference server.

On the embedded default nothing else is needed: on first start the default model is created under
var/models/default, and the inference server that serves it is registered as the demo tenant's
backend `embedded` (model name `default`). Ctrl-C (or SIGTERM) stops every process it started;
if one of them dies, the others are stopped too and the exit code says so. The processes are launched by
areal_web.processes, as the demo's are.
"""

import signal
import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from areal_web.env import env_int, env_str
from areal_web.processes import (
    DEFAULT_MODEL_DIR,
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


class Command(BaseCommand):
    help = "Runs web, worker and beat together (the embedded default needs no other service)."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=env_str("HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=env_int("PORT", 8000))
        parser.add_argument("--worker-concurrency", type=int, default=2)
        parser.add_argument(
            "--inference-port",
            type=int,
            default=env_int("AREAL_INFERENCE_PORT", 8100),
            help="port of the embedded inference server; 0 starts none",
        )
        parser.add_argument("--tenant", default="demo", help="tenant the embedded backend is registered for")

    def handle(self, *args, host, port, worker_concurrency, inference_port, tenant, **options):
        ports_refuse_busy(host, {"PORT": port, "AREAL_INFERENCE_PORT": inference_port})
        call_command("migrate", verbosity=0, interactive=False)
        call_command("bootstrap", tenant=tenant, stdout=self.stdout)
        model_dir = settings.VAR_DIR / DEFAULT_MODEL_DIR
        if inference_port and not (model_dir / "config.json").exists():
            self.stdout.write(f"creating the default model in {model_dir} (first start only)")
            call_command("initmodel", out=str(model_dir), stdout=self.stdout)
        elif inference_port:
            from workers.inference.modelgen import widen_context

            widen_context(model_dir)  # a default model made when its context was 1,024 positions
        commands = {
            "web": web_command(host=host, port=port),
            "worker": worker_command(
                queues=Queue, concurrency=worker_concurrency, log_level="INFO", node="embedded@%h"
            ),
            "beat": beat_command(log_level="INFO"),
        }
        if inference_port:
            commands["inference"] = inference_command(
                model=str(model_dir), host=host, port=inference_port, served_model_name="default"
            )
        for stale in settings.AREAL_PROMETHEUS_DIR.glob("*.db"):  # the last run's Prometheus counters
            stale.unlink(missing_ok=True)
        environment = stack_environment(
            launch_environment(), host=host, inference_ports=[inference_port] if inference_port else []
        )
        environments = {  # each inference server gets its own token (and the folders it may load from)
            "inference": inference_server_environment(
                environment, url=f"http://{host}:{inference_port}", model_store=[model_dir.parent]
            )
        }
        processes = ProcessGroup()
        for name, command in commands.items():
            processes.start(name, command, environment=environments.get(name, environment))
        if inference_port:
            self._register_embedded(tenant, f"http://{host}:{inference_port}", processes["inference"])
        self.stdout.write(
            self.style.SUCCESS(f"\nareal-web console: http://{host}:{port}/  (Ctrl-C stops everything)")
        )
        stopping = False

        def stop(*_):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        exit_code = 0
        while not stopping:
            for name, returncode in processes.exited().items():
                self.stderr.write(f"{name} exited with code {returncode}; stopping the rest")
                exit_code = 1
                stopping = True
            time.sleep(0.5)
        processes.stop()
        self.stdout.write("stopped")
        if exit_code:
            raise CommandError("a process of the stack exited unexpectedly")

    def _register_embedded(self, tenant: str, url: str, process, timeout: float = 120.0) -> None:
        """Waits for the embedded server's /health, then registers (or updates) it as `embedded`."""
        answered = http_wait(
            [url + "/health"],
            ready=lambda status: status == 200,
            timeout=timeout,
            keep_waiting=lambda: process.poll() is None,
        )
        if not answered:
            self.stderr.write(
                f"the embedded inference server at {url} did not answer; the gateway will mark it down"
            )
        call_command(
            "registerbackend",
            tenant,
            name="embedded",
            url=url,
            kind="embedded",
            model="default",
            model_version="0",
            stdout=self.stdout,
        )
