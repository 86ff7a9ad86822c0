"""The model's tool calls, decoded into what BFCL's checkers take, or refused with a reason.

A call names one of the case's tools and carries its arguments as a JSON object (an empty string counts as
no arguments). For the AST checker a call becomes {tool name: arguments}; for the multi-turn executor it
becomes a Python call string, `name(key=value, ...)`, which BFCL's executor evaluates against its API
instances. That string is built here, never taken from the model: the name must be one of the case's
functions, each key an identifier and each value a JSON value written as a Python literal (`repr`), so the
string can only call that function with literal arguments. Anything else is a `Malformed` call with its
reason, never an exception.
"""

import json
import keyword
import math
from dataclasses import dataclass
from typing import Any

from workers.envs.bfcl.cases import Case
from workers.envs.bfcl.tools import function_names


@dataclass(frozen=True)
class ToolCall:
    """One tool call as the model made it: the tool's name and its arguments' JSON text."""

    name: str
    arguments: str


@dataclass(frozen=True)
class Malformed:
    reason: str
    kind: str  # "unknown_function" or "malformed_arguments"


def _refuse_constant(text: str) -> Any:
    raise ValueError(f"{text} is not a JSON number")


def decode_arguments(call: ToolCall) -> dict | Malformed:
    text = call.arguments if isinstance(call.arguments, str) else ""
    if not text.strip():
        return {}
    try:
        arguments = json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as error:
        return Malformed(f"arguments of {call.name!r} are not JSON: {error}", "malformed_arguments")
    if not isinstance(arguments, dict):
        return Malformed(
            f"arguments of {call.name!r} are a JSON {type(arguments).__name__}, not an object",
            "malformed_arguments",
        )
    if not _finite(arguments):
        return Malformed(
            f"arguments of {call.name!r} hold a number that is not finite", "malformed_arguments"
        )
    return arguments


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(inner) for inner in value.values())
    if isinstance(value, list):
        return all(_finite(inner) for inner in value)
    return True


def _known(case: Case, call: ToolCall) -> str | Malformed:
    names = function_names(case)
    if not isinstance(call.name, str) or call.name not in names:
        return Malformed(f"unknown function {call.name!r}", "unknown_function")
    return names[call.name]


def ast_output(case: Case, call: ToolCall) -> dict | Malformed:
    """{tool name: arguments}, the shape the AST checker takes (tool names keep their underscores)."""
    known = _known(case, call)
    if isinstance(known, Malformed):
        return known
    arguments = decode_arguments(call)
    if isinstance(arguments, Malformed):
        return arguments
    return {call.name: arguments}


def call_string(case: Case, call: ToolCall) -> str | Malformed:
    """`name(key=value, ...)` for BFCL's multi-turn executor and checker."""
    known = _known(case, call)
    if isinstance(known, Malformed):
        return known
    arguments = decode_arguments(call)
    if isinstance(arguments, Malformed):
        return arguments
    for key in arguments:
        if not key.isidentifier() or keyword.iskeyword(key):
            return Malformed(
                f"argument name {key!r} of {call.name!r} is not an identifier", "malformed_arguments"
            )
    try:
        rendered = ", ".join(f"{key}={value!r}" for key, value in arguments.items())
    except RecursionError:
        return Malformed(f"arguments of {call.name!r} are nested too deeply", "malformed_arguments")
    return f"{known}({rendered})"


def checker_entry(case: Case) -> dict:
    """The fields of a BFCL test entry that its multi-turn checker and executor read."""
    return {
        "id": case.case_id,
        "initial_config": case.initial_config or {},
        "involved_classes": list(case.involved_classes),
    }
