"""BFCL's own checkers and executor, imported from the installed package (none of their code is here).

`ast_checker` (single-turn categories) and `multi_turn_checker` are the package's functions unchanged;
`execute_calls` is its multi-turn executor (`execute_multi_turn_func_call`), which keeps each case's API
instances in its module's globals under `<model name>_<case id>_<class>_instance`: every run here uses a
name of its own (`run_name()`) and `forget()` drops that run's instances afterwards, so a case can be run
and scored any number of times in one process without one run seeing another's state.
"""

import sys
import threading
import types
import uuid
from dataclasses import dataclass
from typing import Any

# The model name the AST checker is given. It looks the name up with "_" read as "/", so it has none.
MODEL_NAME = "areal-web"
MODEL_CONFIG_MODULE = "bfcl_eval.constants.model_config"

_lock = threading.Lock()
_loaded: dict[str, Any] = {}


@dataclass(frozen=True)
class ModelConfig:
    """What the AST checker reads of a model's entry in BFCL's model table, and nothing else."""

    underscore_to_dot: bool


def _install_model_config() -> None:
    # The AST checker imports bfcl_eval.constants.model_config only to read one flag of the model it scores,
    # MODEL_CONFIG_MAPPING[name].underscore_to_dot, and that module imports every provider's SDK (openai,
    # anthropic, mistral, cohere, google, ...) to build its handler table. Rather than install those SDKs,
    # a module of our own stands in for it in sys.modules before the checker is imported, with one entry:
    # ours. underscore_to_dot is True because our tools name `math.factorial` as `math_factorial`
    # (tools.tool_name), so the checker compares the underscored name.
    entry = ModelConfig(underscore_to_dot=True)
    module = sys.modules.get(MODEL_CONFIG_MODULE)
    if module is None:
        import bfcl_eval.constants

        module = types.ModuleType(MODEL_CONFIG_MODULE, "Stand-in for BFCL's model table (workers.envs.bfcl).")
        module.MODEL_CONFIG_MAPPING = {}  # type: ignore[attr-defined]
        sys.modules[MODEL_CONFIG_MODULE] = module
        bfcl_eval.constants.model_config = module
    module.MODEL_CONFIG_MAPPING.setdefault(MODEL_NAME, entry)


def _modules() -> dict[str, Any]:
    with _lock:
        if not _loaded:
            _install_model_config()
            from bfcl_eval.constants.enums import Language
            from bfcl_eval.eval_checker.ast_eval import ast_checker
            from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_checker, multi_turn_utils

            _loaded.update(
                language=Language.PYTHON,
                ast=ast_checker,
                multi_turn=multi_turn_checker,
                utils=multi_turn_utils,
            )
        return _loaded


def ast_check(*, functions: list[dict], model_output: list[dict], ground_truth: list, category: str) -> dict:
    """BFCL's AST checker: `model_output` is [{tool name: {parameter: value}}, ...]."""
    modules = _modules()
    return modules["ast"].ast_checker(
        functions, model_output, ground_truth, modules["language"], category, MODEL_NAME
    )


def multi_turn_check(
    *, decoded: list[list[list[str]]], ground_truth: list[list[str]], entry: dict, category: str, name: str
) -> dict:
    """BFCL's multi-turn checker: `decoded` holds each turn's steps' call strings; it executes them and the
    ground truth from the initial state, turn by turn, and compares states and results."""
    return _modules()["multi_turn"].multi_turn_checker(decoded, ground_truth, entry, category, name)


def execute_calls(*, calls: list[str], entry: dict, name: str) -> list[str]:
    """Runs call strings against the case's API instances of run `name` (made on the first call of the
    run, kept across its turns) and returns one result string per call."""
    results, _ = _modules()["utils"].execute_multi_turn_func_call(
        func_call_list=calls,
        initial_config=entry["initial_config"],
        involved_classes=entry["involved_classes"],
        model_name=name,
        test_entry_id=entry["id"],
    )
    return results


def run_name() -> str:
    """A name no other run has: the prefix of the instance names its executions keep."""
    return f"arealrun{uuid.uuid4().hex}"


def forget(name: str) -> None:
    """Drops the API instances every execution under `name` kept (the checker's `<name>_eval` and
    `<name>_ground_truth_eval` included)."""
    namespace = vars(_modules()["utils"])
    for key in [key for key in list(namespace) if key.startswith(f"{name}_")]:
        namespace.pop(key, None)
