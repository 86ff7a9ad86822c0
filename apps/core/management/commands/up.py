"""Starts the whole stack in the foreground: web (uvicorn, ASGI), a Celery worker, Celery beat and the
embedded inference server.

On the embedded default nothing else is needed: on first start the default model is created under
var/models/default, and the inference server that serves it is registered as the demo tenant's
backend `embedded` (model name `default`). Ctrl-C (or SIGTERM) stops every process it started;
if one of them dies, the others are stopped too and the exit code says so.
"""

import os
import signal
import socket
import subprocess
import sys
import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from apps.inference.management.commands.initmodel import DEFAULT_MODEL_DIR
from areal_web.queues import Queue


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


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


class Command(BaseCommand):
    help = "Runs web, worker and beat together (the embedded default needs no other service)."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--worker-concurrency", type=int, default=2)
        parser.add_argument(
            "--inference-port",
            type=int,
            default=int(os.environ.get("AREAL_INFERENCE_PORT", "8100")),
            help="port of the embedded inference server; 0 starts none",
        )
        parser.add_argument("--tenant", default="demo", help="tenant the embedded backend is registered for")

    def handle(self, *args, host, port, worker_concurrency, inference_port, tenant, **options):
        for name, wanted in (("PORT", port), ("AREAL_INFERENCE_PORT", inference_port)):
            if wanted and not port_is_free(host, wanted):
                raise CommandError(
                    f"port {wanted} on {host} is already in use; stop what holds it or set {name}=<free port>"
                )
        call_command("migrate", verbosity=0, interactive=False)
        call_command("bootstrap", tenant=tenant, stdout=self.stdout)
        python = sys.executable
        model_dir = settings.VAR_DIR / DEFAULT_MODEL_DIR
        if inference_port and not (model_dir / "config.json").exists():
            self.stdout.write(f"creating the default model in {model_dir} (first start only)")
            call_command("initmodel", out=str(model_dir), stdout=self.stdout)
        elif inference_port:
            from workers.inference.modelgen import widen_context

            widen_context(model_dir)  # a default model made when its context was 1,024 positions
        queues = ",".join(queue.value for queue in Queue)
        commands = {
            "web": [
                python,
                "-m",
                "uvicorn",
                "areal_web.asgi:application",
                "--host",
                host,
                "--port",
                str(port),
                "--no-access-log",
            ],
            "worker": [
                python,
                "-m",
                "celery",
                "-A",
                "areal_web",
                "worker",
                "-Q",
                queues,
                "--concurrency",
                str(worker_concurrency),
                "--loglevel",
                "INFO",
                "-n",
                "embedded@%h",
            ],
            "beat": [
                python,
                "-m",
                "celery",
                "-A",
                "areal_web",
                "beat",
                "--loglevel",
                "INFO",
                "-s",
                str(settings.CELERY_BEAT_SCHEDULE_FILENAME),
            ],
        }
        if inference_port:
            commands["inference"] = [
                python,
                "-m",
                "workers.inference.server",
                "--model",
                str(model_dir),
                "--host",
                host,
                "--port",
                str(inference_port),
                "--served-model-name",
                "default",
            ]
        for stale in settings.AREAL_PROMETHEUS_DIR.glob("*.db"):  # the last run's Prometheus counters
            stale.unlink(missing_ok=True)
        environment = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "areal_web.settings.local"),
        }
        environment = stack_environment(
            environment, host=host, inference_ports=[inference_port] if inference_port else []
        )
        environments = {  # each inference server gets its own token (and the folders it may load from)
            "inference": inference_server_environment(
                environment, url=f"http://{host}:{inference_port}", model_store=[model_dir.parent]
            )
        }
        processes = {
            name: subprocess.Popen(command, env=environments.get(name, environment), start_new_session=True)
            for name, command in commands.items()
        }
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
            for name, process in processes.items():
                if process.poll() is not None:
                    self.stderr.write(f"{name} exited with code {process.returncode}; stopping the rest")
                    exit_code = 1
                    stopping = True
            time.sleep(0.5)
        for process in processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for process in processes.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        self.stdout.write("stopped")
        if exit_code:
            raise CommandError("a process of the stack exited unexpectedly")

    def _register_embedded(self, tenant: str, url: str, process, timeout: float = 120.0) -> None:
        """Waits for the embedded server's /health, then registers (or updates) it as `embedded`."""
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
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
