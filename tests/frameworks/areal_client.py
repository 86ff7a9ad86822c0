"""AReaL's `OpenAIProxyClient` (the `areal` package, installed without its dependencies by
scripts/frameworks_venv.sh), imported alone.

`import areal.experimental.openai.proxy` would run AReaL's package initialisers, which load its whole training
stack (controllers, launchers, Ray, hydra configs, ...). The client needs none of it: its module,
`areal/experimental/openai/proxy/client_session.py`, with what it imports (the proxy's request models and
paths, an HTTP helper, AReaL's logging) runs on aiohttp, tenacity, colorlog and pydantic. So the packages on
that path are registered here as plain namespaces over AReaL's own folders, without their `__init__`, and the
one heavy module on it, `areal.experimental.openai.types` (torch and AReaL's engine structures, used by the
client only in type hints and in `export_interactions`, which this gateway does not serve), is stood in for
by a module with just the name the proxy's interaction cache subclasses with. The client's code itself runs
unchanged."""

import importlib
import importlib.util
import sys
import types
from pathlib import Path

_PACKAGES = (
    "areal",
    "areal.experimental",
    "areal.experimental.openai",
    "areal.experimental.openai.proxy",
    "areal.infra",
    "areal.infra.utils",
)


def _load_client():
    spec = importlib.util.find_spec("areal")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the areal package is not installed (make test-frameworks installs it)")
    root = Path(next(iter(spec.submodule_search_locations)))
    for name in _PACKAGES:
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [str(root.joinpath(*name.split(".")[1:]))]
            sys.modules[name] = package
    if "areal.experimental.openai.types" not in sys.modules:
        stand_in = types.ModuleType("areal.experimental.openai.types")

        class InteractionWithTokenLogpReward:  # the cache's value type; never built by the calls used here
            pass

        stand_in.InteractionWithTokenLogpReward = InteractionWithTokenLogpReward  # type: ignore[attr-defined]
        sys.modules[stand_in.__name__] = stand_in
    return importlib.import_module("areal.experimental.openai.proxy.client_session").OpenAIProxyClient


OpenAIProxyClient = _load_client()
