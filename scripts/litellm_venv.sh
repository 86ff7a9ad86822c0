#!/usr/bin/env bash
# Build .venv-litellm (the LiteLLM proxy, the gateway benchmark's peer) in the repository root, idempotently.
# LiteLLM's proxy pins many packages of its own, so it lives apart from the project's .venv.
# No database extras: with DATABASE_URL LiteLLM needs Prisma engine binaries that cannot be fetched here
# (see the team's shared PEERS.md notes), so the benchmark runs it without a database.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${LITELLM_VENV:-$repo_root/.venv-litellm}"
litellm_version="${LITELLM_VERSION:-1.106.2}"
python_bin="${PYTHON:-python3.11}"

is_ready() {
    [ -x "$venv/bin/litellm" ] && "$venv/bin/python" - "$litellm_version" <<'PY' >/dev/null 2>&1
import sys
from importlib.metadata import version
assert version("litellm") == sys.argv[1]
import litellm.proxy.proxy_server  # noqa: F401  (needs the [proxy] extra)
PY
}

if is_ready; then
    echo "litellm_venv: $venv already has litellm[proxy]==$litellm_version"
    exit 0
fi

echo "litellm_venv: building $venv with litellm[proxy]==$litellm_version (a minute or two)"
[ -x "$venv/bin/python" ] || "$python_bin" -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet "litellm[proxy]==$litellm_version"

if ! is_ready; then
    echo "litellm_venv: $venv was built but litellm.proxy does not import" >&2
    exit 1
fi
echo "litellm_venv: ready"
