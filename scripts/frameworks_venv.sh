#!/usr/bin/env bash
# Build .venv-frameworks (the agent-framework tier, `make test-frameworks`) in the repository root, idempotently.
# The frameworks pin their own versions of openai, pydantic and friends, so they live apart from the project's
# .venv. The project itself is installed there too (editable) with the test runner from its dev extra, since the
# tests start the gateway and the embedded server in that interpreter as tests/gateway does.
#
# AReaL (`areal`) is installed without its dependencies: they are a whole training stack (vLLM/SGLang
# launchers, Ray, wandb, a torch that is not ours, ...). The tier uses only its OpenAIProxyClient, whose module
# chain needs aiohttp, tenacity, colorlog, pydantic, numpy, Pillow, openai and torch: the project brings
# torch and numpy, the rest are installed here by name, aiohttp included (the gateway forwards with its own
# client, so the project's runtime does not bring it). tests/frameworks/areal_client.py imports that chain
# alone, without AReaL's package initialisers.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${FRAMEWORKS_VENV:-$repo_root/.venv-frameworks}"
python_bin="${PYTHON:-python3.11}"

# The versions the tier proves; change them here only.
frameworks=(
    "openai-agents==0.24.0"
    "langchain-openai==1.7.4"
    "langgraph==1.2.24"
    "pydantic-ai-slim[openai]==2.68.0"
    "smolagents==1.26.0"
)
areal_version="1.0.4"
areal_client_needs=("aiohttp>=3.10,<4" "tenacity>=8.2" "colorlog" "pillow")
# torch as the project pins it (the CPU build this machine keeps on disk): an unpinned torch would pull a
# multi-gigabyte CUDA build.
torch_pin="torch==2.13.0"

quiet_pip() {  # this machine's pip config names local indexes that may be absent: drop those warnings
    "$venv/bin/pip" "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
}

# Reads the project's dev extra and prints the requirements the test runner needs (pytest and its plugins,
# factory-boy), with the ranges pyproject.toml gives them.
test_requirements() {
    "$python_bin" - "$repo_root/pyproject.toml" <<'PY'
import re
import sys
import tomllib

with open(sys.argv[1], "rb") as handle:
    dev = tomllib.load(handle)["project"]["optional-dependencies"]["dev"]
for requirement in dev:
    name = re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0]
    if name in ("pytest", "pytest-django", "pytest-asyncio", "factory-boy"):
        print(requirement)
PY
}

is_ready() {
    [ -x "$venv/bin/python" ] && [ "$venv/.built-from" -nt "$repo_root/pyproject.toml" ] \
        && [ "$(cat "$venv/.built-from")" = "$(wanted)" ] && "$venv/bin/python" - <<'PY' >/dev/null 2>&1
import agents, aiohttp, colorlog, langchain_openai, langgraph, pydantic_ai, smolagents, pytest_django, areal_web  # noqa: F401
PY
}

wanted() {  # what a build installs, one line: a change here rebuilds
    echo "${frameworks[*]} areal==$areal_version ${areal_client_needs[*]} $torch_pin"
}

if is_ready; then
    echo "frameworks_venv: $venv is up to date"
    exit 0
fi

echo "frameworks_venv: building $venv (a few minutes the first time)"
[ -x "$venv/bin/python" ] || "$python_bin" -m venv "$venv"
quiet_pip install --quiet --upgrade pip
mapfile -t test_runner < <(test_requirements)
quiet_pip install --quiet "$torch_pin" -e "$repo_root" "${test_runner[@]}" "${frameworks[@]}" "${areal_client_needs[@]}"
quiet_pip install --quiet --no-deps "areal==$areal_version"
wanted >"$venv/.built-from"

if ! is_ready; then
    echo "frameworks_venv: $venv was built but a framework does not import" >&2
    exit 1
fi
echo "frameworks_venv: ready"
