"""One real vLLM server (from .venv-vllm) for the whole tier, serving the project's default model.

Built by `make test-vllm` (scripts/vllm_venv.sh). Without .venv-vllm the tier skips, except under
CI=true, where it fails."""

import os

import openai
import pytest

from areal_web.env import env_str
from workers.inference.modelgen import create_default_model
from workers.inference.vllm import (
    VLLM_PYTHON_ENV,
    VllmAdmin,
    VllmServer,
    VllmServerConfig,
    default_vllm_python,
    vllm_install_error,
)

SERVED_MODEL = "areal-default"
MAX_LORA_RANK = 8
# The NCCL weight-transfer backend is configured only so that a test can show what it does on CPU.
NCCL_WEIGHT_TRANSFER = ("--weight-transfer-config", '{"backend": "nccl"}')


def _on_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


@pytest.fixture(scope="session")
def vllm_python() -> str:
    python = default_vllm_python(env_str(VLLM_PYTHON_ENV, ""))
    problem = vllm_install_error(python)
    if problem is None:
        return python
    message = f"the vLLM tier needs .venv-vllm ({problem})"
    if _on_ci():
        pytest.fail(f"{message}; CI=true, so this fails instead of skipping", pytrace=False)
    pytest.skip(f"{message}: run `make test-vllm`")


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    return create_default_model(tmp_path_factory.mktemp("vllm-model") / "default", seed=0)


@pytest.fixture(scope="session")
def vllm_server(vllm_python, model_dir, tmp_path_factory):
    config = VllmServerConfig(
        model_path=str(model_dir),
        served_model_name=SERVED_MODEL,
        python=vllm_python,
        max_model_len=2048,  # room for test_token_versions' long stream across a publication
        dtype="float32",
        cpu_kv_cache_gib=1,
        dev_mode=True,
        max_lora_rank=MAX_LORA_RANK,
        tool_call_parser="hermes",
        extra_args=NCCL_WEIGHT_TRANSFER,
    )
    log_path = tmp_path_factory.mktemp("vllm-log") / "server.log"
    with VllmServer(config, log_path=log_path, startup_timeout_s=600) as server:
        yield server
    print(f"vLLM server log: {log_path}")


@pytest.fixture(scope="session")
def openai_client(vllm_server):
    with openai.OpenAI(base_url=vllm_server.api_base, api_key="unused", max_retries=0, timeout=120) as client:
        yield client


@pytest.fixture(scope="session")
def admin(vllm_server):
    with VllmAdmin(vllm_server.base_url) as client:
        yield client
