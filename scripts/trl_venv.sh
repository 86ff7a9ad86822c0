#!/usr/bin/env bash
# Build .venv-trl (TRL's GRPOTrainer, the trainer benchmark's peer) in the repository root, idempotently.
# TRL pins its own accelerate/datasets stack, so it lives apart from the project's .venv; torch is the same
# CPU build (2.13.0) and transformers the same major as ours, so both trainers run the same kernels.
# The project itself is not installed there: bench/training puts the repository root on PYTHONPATH.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${TRL_VENV:-$repo_root/.venv-trl}"
trl_version="${TRL_VERSION:-1.16.0}"
torch_version="${TORCH_VERSION:-2.13.0}"
python_bin="${PYTHON:-python3.11}"

quiet_pip() {  # this machine's pip config names local indexes that may be absent: drop those warnings
    "$venv/bin/pip" "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
}

is_ready() {
    [ -x "$venv/bin/python" ] && "$venv/bin/python" - "$trl_version" <<'PY' >/dev/null 2>&1
import sys
from importlib.metadata import version
assert version("trl") == sys.argv[1]
from trl import GRPOConfig, GRPOTrainer  # noqa: F401
import peft  # noqa: F401  (the LoRA mode of bench/training)
PY
}

if is_ready; then
    echo "trl_venv: $venv already has trl==$trl_version"
    exit 0
fi

echo "trl_venv: building $venv with trl==$trl_version and torch==$torch_version (CPU; a minute or two)"
[ -x "$venv/bin/python" ] || "$python_bin" -m venv "$venv"
echo "*" > "$venv/.gitignore"  # keep the venv out of git status whatever the repository's .gitignore says
quiet_pip install --quiet --upgrade pip
quiet_pip install --quiet "torch==$torch_version"
quiet_pip install --quiet "trl==$trl_version" "transformers>=5,<6" tokenizers safetensors psutil "peft>=0.17,<1"

if ! is_ready; then
    echo "trl_venv: $venv was built but trl does not import" >&2
    exit 1
fi
echo "trl_venv: ready"
