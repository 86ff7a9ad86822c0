"""Real servers for tests: the embedded inference server as a subprocess, and the whole areal-web ASGI
application (gateway + Django) under uvicorn in a thread of the test process, so it uses the test
database the suite created."""

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_healthy(url: str, *, timeout: float = 120, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode} before it was healthy")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} not healthy after {timeout} s")


@contextlib.contextmanager
def inference_server(model_dir, *, served_model: str = "policy-small", version: str = "1", log_path: Path):
    """Started as `manage.py up` starts it: with its own admin token in its environment. Its model store is the
    installation's and the temporary folder, where the tests' models live."""
    import tempfile

    from django.conf import settings

    from areal_web.processes import inference_server_environment

    port = free_port()
    command = [
        sys.executable,
        "-m",
        "workers.inference.server",
        "--model",
        str(model_dir),
        "--port",
        str(port),
        "--served-model-name",
        served_model,
        "--model-version",
        version,
    ]
    environment = inference_server_environment(
        dict(os.environ),
        url=f"http://127.0.0.1:{port}",
        model_store=[settings.VAR_DIR, tempfile.gettempdir()],
    )
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=environment)
        try:
            wait_until_healthy(f"http://127.0.0.1:{port}/health", process=process)
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


@contextlib.contextmanager
def web_server_in_thread():
    """Serves areal_web.asgi:application (with lifespan: journal recovery and flusher) on a free port."""
    import uvicorn

    from areal_web.asgi import application

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            application, host="127.0.0.1", port=port, lifespan="on", log_level="warning", access_log=False
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the web server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}", application.gateway
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@contextlib.contextmanager
def web_server_process(*, log_path: Path, extra_env: dict | None = None):
    """The web process as production runs it (uvicorn), on the test database: for kill -9 tests."""
    port = free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "areal_web.settings.test",
        "AREAL_USE_TEST_DATABASE": "true",
        **(extra_env or {}),
    }
    command = [
        sys.executable,
        "-m",
        "uvicorn",
        "areal_web.asgi:application",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--lifespan",
        "on",
        "--no-access-log",
    ]
    with open(log_path, "a") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until_healthy(f"http://127.0.0.1:{port}/login/", process=process, timeout=60)
            yield process, f"http://127.0.0.1:{port}"
        finally:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
