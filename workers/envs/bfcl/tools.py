"""A case as an agent's request: BFCL's function documents as OpenAI tools, and the turns' messages.

BFCL writes its parameter types in its own vocabulary (`dict`, `float`, `tuple`, `any`, Java and JavaScript
names); the package's own table (`bfcl_eval.constants.type_mappings.GORILLA_TO_OPENAPI`) maps them to JSON
Schema (`dict` → `object`, `float` → `number`, `tuple` → `array`, `any` → `string`, as the AST checker
expects a string there), and a type it does not know becomes `string`, as BFCL's own OpenAI handler does.
Keys that are not JSON Schema (`optional`, a multi-turn document's `response`) are dropped. Function names
with dots (`math.factorial`) are sent with underscores (`math_factorial`): OpenAI tool names allow no dots,
and the AST checker is told so (checkers.py).
"""

import copy
import re

from workers.envs.bfcl.cases import Case

DROPPED_KEYS = frozenset({"optional", "response"})


def tool_name(function_name: str) -> str:
    return re.sub(r"\.", "_", function_name)


def json_schema(schema: dict) -> dict:
    """One BFCL parameter schema (or a nested one) as JSON Schema."""
    from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI

    converted: dict = {}
    for key, value in schema.items():
        if key in DROPPED_KEYS:
            continue
        if key == "type":
            converted["type"] = (
                GORILLA_TO_OPENAPI.get(value, "string") if isinstance(value, str) else "string"
            )
        elif key == "properties" and isinstance(value, dict):
            converted["properties"] = {
                name: json_schema(inner) if isinstance(inner, dict) else {"type": "string"}
                for name, inner in value.items()
            }
        elif key == "items" and isinstance(value, dict):
            converted["items"] = json_schema(value)
        elif key == "required" and not isinstance(value, list):
            continue  # a per-property flag in a few documents, not JSON Schema's list of names
        else:
            converted[key] = copy.deepcopy(value)
    if "type" not in converted:
        converted["type"] = (
            "object" if "properties" in converted else "array" if "items" in converted else "string"
        )
    return converted


def openai_tool(function: dict) -> dict:
    parameters = json_schema(function.get("parameters") or {"type": "dict", "properties": {}})
    parameters["type"] = "object"
    parameters.setdefault("properties", {})
    return {
        "type": "function",
        "function": {
            "name": tool_name(function["name"]),
            "description": function.get("description", ""),
            "parameters": parameters,
        },
    }


def openai_tools(case: Case) -> list[dict]:
    """The case's functions as the `tools` of a chat completion request."""
    return [openai_tool(function) for function in case.functions]


def function_names(case: Case) -> dict[str, str]:
    """The tool name the model sees → BFCL's function name."""
    return {tool_name(function["name"]): function["name"] for function in case.functions}


def turn_messages(case: Case, turn: int) -> list[dict]:
    """The messages a turn adds to the conversation (copies: the case stays as loaded)."""
    return [dict(message) for message in case.turns[turn]]
