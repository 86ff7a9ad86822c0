"""A versioned agent harness applied to an unmodified agent's requests and to the model's answers (pure).

What the model sees (`apply_to_request`): the harness system prompt before the agent's own (merged into one
system message), the memory exemplars after it and before the conversation, and the agent's tools with the
harness's routing applied:

- `{"tool": {"action": "disable"}}`: the tool is removed from what the model sees.
- `{"tool": {"action": "route", "to": "tool_v2", "version": "2"}}`: the model keeps seeing `tool` (its
  original name and schema; when the agent offers only `tool_v2`, that schema under the name `tool`), and
  the entry of `tool_v2` is hidden from it; a call the model makes to `tool` reaches the agent as a call to
  `tool_v2` (`rewrite_response`, `rewrite_chunk`), and the agent's history, which holds `tool_v2` calls, is
  shown to the model with `tool` again, so the prompt stays consistent from turn to turn.

A route applies to a request only when the agent offers its target (`HarnessSpec.for_request`). Both wires
are handled: OpenAI chat completions bodies (`messages`, `tools` with `function`) and Anthropic
Messages bodies (`system`, `tools` with `input_schema`, `tool_use` blocks). On the Anthropic wire the
exemplars become a text memory block after the harness system prompt, before the agent's own (its messages
must alternate user and assistant, so they cannot be inserted as turns). The gateway translates Anthropic
requests to chat first, so there the chat rules hold.
"""

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

TOOL_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
EXEMPLAR_ROLES = frozenset({"user", "assistant", "tool"})
MAX_SYSTEM_PROMPT_CHARS = 8000
MAX_EXEMPLARS = 8
MAX_EXEMPLAR_MESSAGES = 12
MAX_EXEMPLARS_JSON_CHARS = 32_000
MAX_ROUTES = 64
MAX_VERSION_CHARS = 40


@dataclass(frozen=True)
class HarnessSpec:
    """One harness version as the gateway applies it. `exemplars`: a tuple of message lists (chat format);
    `tool_routing`: `{"tool": {"action": "disable"}}` or `{"action": "route", "to", "version"}`;
    `tool_versions`: `{"tool": "version"}` of tools the harness knows the version of."""

    label: str
    system_prompt: str = ""
    exemplars: tuple = ()
    tool_routing: Mapping = field(default_factory=dict)
    tool_versions: Mapping = field(default_factory=dict)

    def routes(self) -> dict[str, str]:
        """{original name: target name} of the routed tools."""
        return {
            name: rule["to"]
            for name, rule in self.tool_routing.items()
            if rule.get("action") == "route" and rule.get("to")
        }

    def disabled(self) -> frozenset[str]:
        return frozenset(name for name, rule in self.tool_routing.items() if rule.get("action") == "disable")

    def is_empty(self) -> bool:
        return not (self.system_prompt or self.exemplars or self.tool_routing)

    def for_request(self, tools) -> "HarnessSpec":
        """The harness for one request offering `tools`: a route whose target the request does not offer is
        left out (the agent could not run a call renamed to it); a request without tools keeps every route,
        so the calls in its history are still shown to the model by the names it knows."""
        if not tools:
            return self
        offered = set(offered_tool_names(tools))
        routing = {
            name: rule
            for name, rule in self.tool_routing.items()
            if rule.get("action") != "route" or rule.get("to") in offered
        }
        return self if len(routing) == len(self.tool_routing) else replace(self, tool_routing=routing)


# ---- validation ---------------------------------------------------------------------------------------


def validate_harness(
    *, system_prompt: str, exemplars: list, tool_routing: dict, tool_versions: dict
) -> dict[str, list[str]]:
    """Field errors of a harness (empty when valid): bounded sizes, exemplars as message lists with known
    roles, tool routing entries well-formed (a route's target neither routed nor disabled itself)."""
    errors: dict[str, list[str]] = {}

    def add(name: str, problem: str) -> None:
        errors.setdefault(name, []).append(problem)

    if not isinstance(system_prompt, str):
        add("system_prompt", "must be text")
    elif len(system_prompt) > MAX_SYSTEM_PROMPT_CHARS:
        add("system_prompt", f"at most {MAX_SYSTEM_PROMPT_CHARS} characters")
    for problem in _exemplar_problems(exemplars):
        add("exemplars", problem)
    for problem in _routing_problems(tool_routing):
        add("tool_routing", problem)
    if not isinstance(tool_versions, dict):
        add("tool_versions", 'must be an object {"tool": "version"}')
    else:
        if len(tool_versions) > MAX_ROUTES:
            add("tool_versions", f"at most {MAX_ROUTES} tools")
        for name, version in tool_versions.items():
            if not TOOL_NAME.match(str(name)):
                add("tool_versions", f"{name!r} is not a tool name")
            if not isinstance(version, str) or not version or len(version) > MAX_VERSION_CHARS:
                add("tool_versions", f"the version of {name!r} must be text of 1 to {MAX_VERSION_CHARS}")
    return errors


def exemplar_messages(exemplar) -> list | None:
    """The messages of one stored exemplar: a message list, or `{"situation", "messages"}`."""
    if isinstance(exemplar, dict):
        exemplar = exemplar.get("messages")
    return exemplar if isinstance(exemplar, list) else None


def _exemplar_problems(exemplars) -> list[str]:
    if not isinstance(exemplars, list):
        return ["must be a list of message lists"]
    problems = []
    if len(exemplars) > MAX_EXEMPLARS:
        problems.append(f"at most {MAX_EXEMPLARS} exemplars")
    if len(json.dumps(exemplars, default=str)) > MAX_EXEMPLARS_JSON_CHARS:
        problems.append(f"at most {MAX_EXEMPLARS_JSON_CHARS} characters in all")
    for index, exemplar in enumerate(exemplars):
        messages = exemplar_messages(exemplar)
        if not messages:
            problems.append(f"exemplar {index} must be a non-empty list of messages")
            continue
        if len(messages) > MAX_EXEMPLAR_MESSAGES:
            problems.append(f"exemplar {index} has more than {MAX_EXEMPLAR_MESSAGES} messages")
        for message in messages:
            if not isinstance(message, dict) or message.get("role") not in EXEMPLAR_ROLES:
                problems.append(f"exemplar {index}: each message needs a role among user, assistant, tool")
                break
    return problems


def _routing_problems(tool_routing) -> list[str]:
    if not isinstance(tool_routing, dict):
        return ['must be an object {"tool": {"action": ...}}']
    problems = []
    if len(tool_routing) > MAX_ROUTES:
        problems.append(f"at most {MAX_ROUTES} tools")
    for name, rule in tool_routing.items():
        if not TOOL_NAME.match(str(name)):
            problems.append(f"{name!r} is not a tool name")
        if not isinstance(rule, dict) or rule.get("action") not in ("disable", "route"):
            problems.append(f"{name}: the action must be disable or route")
            continue
        if rule["action"] == "disable":
            if set(rule) - {"action"}:
                problems.append(f"{name}: disable takes no other keys")
            continue
        target, version = rule.get("to"), rule.get("version", "")
        if set(rule) - {"action", "to", "version"}:
            problems.append(f"{name}: a route takes only to and version")
        if not isinstance(target, str) or not TOOL_NAME.match(target) or target == name:
            problems.append(f"{name}: a route needs `to`, another tool's name")
        elif target in tool_routing:
            problems.append(f"{name}: its target {target} is routed or disabled itself")
        if not isinstance(version, str) or len(version) > MAX_VERSION_CHARS:
            problems.append(f"{name}: the version must be text of at most {MAX_VERSION_CHARS}")
    targets = [rule.get("to") for rule in tool_routing.values() if isinstance(rule, dict)]
    duplicated = {target for target in targets if target and targets.count(target) > 1}
    if duplicated:
        problems.append(f"two tools are routed to {', '.join(sorted(duplicated))}")
    return problems


# ---- requests -----------------------------------------------------------------------------------------


def _is_anthropic(body: dict) -> bool:
    if "system" in body:
        return True
    if any(isinstance(tool, dict) and "input_schema" in tool for tool in body.get("tools") or []):
        return True
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(
            isinstance(block, dict) and block.get("type") in ("tool_use", "tool_result") for block in content
        ):
            return True
    return False


def apply_to_request(body: dict, spec: HarnessSpec | None, *, wire: str | None = None) -> dict:
    """The body the model is sent under `spec` (a new dict; `body` is not changed). `wire`: "chat" or
    "anthropic"; None tells them apart by the body's shape."""
    if spec is None or spec.is_empty():
        return body
    anthropic = _is_anthropic(body) if wire is None else wire == "anthropic"
    out = dict(body)
    if isinstance(body.get("messages"), list):
        out["messages"] = _history_for_model(body["messages"], spec, anthropic=anthropic)
        if anthropic:
            system = _anthropic_system(body.get("system"), spec)
            if system:
                out["system"] = system
        else:
            out["messages"] = _with_system_and_exemplars(out["messages"], spec)
    if isinstance(body.get("tools"), list):
        tools = _tools_for_model(body["tools"], spec, anthropic=anthropic)
        if tools:
            out["tools"] = tools
        else:
            out.pop("tools", None)
            out.pop("tool_choice", None)
        if "tool_choice" in out:
            choice = _tool_choice_for_model(out["tool_choice"], spec, anthropic=anthropic)
            if choice is None:
                out.pop("tool_choice")
            else:
                out["tool_choice"] = choice
    return out


def _merge_text(prefix: str, content):
    if not content:
        return prefix
    if isinstance(content, str):
        return f"{prefix}\n\n{content}"
    if isinstance(content, list):
        return [{"type": "text", "text": prefix}, *content]
    return prefix


def _with_system_and_exemplars(messages: list, spec: HarnessSpec) -> list:
    head, rest = [], list(messages)
    if rest and isinstance(rest[0], dict) and rest[0].get("role") in ("system", "developer"):
        head = [rest.pop(0)]
    if spec.system_prompt:
        if head:
            head = [{**head[0], "content": _merge_text(spec.system_prompt, head[0].get("content"))}]
        else:
            head = [{"role": "system", "content": spec.system_prompt}]
    memory = [dict(message) for exemplar in spec.exemplars for message in exemplar_messages(exemplar) or []]
    return head + memory + rest


def _exemplars_as_text(spec: HarnessSpec) -> str:
    blocks = []
    for index, exemplar in enumerate(spec.exemplars, start=1):
        lines = []
        for message in exemplar_messages(exemplar) or []:
            text = message.get("content") or ""
            if not isinstance(text, str):
                text = json.dumps(text, ensure_ascii=False)
            calls = [
                f"{call.get('function', {}).get('name')}({call.get('function', {}).get('arguments')})"
                for call in message.get("tool_calls") or []
            ]
            lines.append(f"{message.get('role')}: {text}" + (f" [calls {', '.join(calls)}]" if calls else ""))
        blocks.append(f"Example {index}:\n" + "\n".join(lines))
    return "Worked examples from earlier conversations:\n\n" + "\n\n".join(blocks) if blocks else ""


def _anthropic_system(system, spec: HarnessSpec):
    memory = _exemplars_as_text(spec)
    prefix = "\n\n".join(part for part in (spec.system_prompt, memory) if part)
    if not prefix:
        return system
    return _merge_text(prefix, system)


def _history_for_model(messages: list, spec: HarnessSpec, *, anthropic: bool) -> list:
    """The agent's history with calls to route targets named as the model knows them."""
    back = {target: name for name, target in spec.routes().items()}
    if not back:
        return list(messages)
    out = []
    for message in messages:
        if not isinstance(message, dict):
            out.append(message)
            continue
        out.append(_renamed_message(message, back, anthropic=anthropic))
    return out


def _renamed_message(message: dict, names: dict, *, anthropic: bool) -> dict:
    """A copy of `message` with its tool calls (and a tool result's `name`) renamed by `names`."""
    renamed = dict(message)
    if isinstance(message.get("tool_calls"), list):
        calls = []
        for call in message["tool_calls"]:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and function.get("name") in names:
                call = {**call, "function": {**function, "name": names[function["name"]]}}
            calls.append(call)
        renamed["tool_calls"] = calls
    function_call = message.get("function_call")
    if isinstance(function_call, dict) and function_call.get("name") in names:
        renamed["function_call"] = {**function_call, "name": names[function_call["name"]]}
    if message.get("role") == "tool" and message.get("name") in names:
        renamed["name"] = names[message["name"]]
    content = message.get("content")
    if isinstance(content, list):
        renamed["content"] = [
            {**block, "name": names[block["name"]]}
            if isinstance(block, dict) and block.get("type") == "tool_use" and block.get("name") in names
            else block
            for block in content
        ]
    return renamed


def _tool_name(tool, *, anthropic: bool) -> str | None:
    if not isinstance(tool, dict):
        return None
    if anthropic or "function" not in tool:
        return tool.get("name")
    function = tool.get("function")
    return function.get("name") if isinstance(function, dict) else None


def _renamed_tool(tool: dict, name: str, *, anthropic: bool) -> dict:
    if anthropic or "function" not in tool:
        return {**tool, "name": name}
    return {**tool, "function": {**tool["function"], "name": name}}


def offered_tool_names(tools) -> list[str]:
    """The names of the tools a request offers (either wire)."""
    return [name for tool in tools or [] if (name := _tool_name(tool, anthropic=False))]


def _tools_for_model(tools: list, spec: HarnessSpec, *, anthropic: bool) -> list:
    routes, disabled = spec.routes(), spec.disabled()
    by_name = {_tool_name(tool, anthropic=anthropic): tool for tool in tools}
    targets = {target: name for name, target in routes.items()}
    out = []
    for tool in tools:
        name = _tool_name(tool, anthropic=anthropic)
        if name in disabled:
            continue
        if name in targets:
            original = targets[name]
            if original not in by_name:  # only the new version is offered: the model sees it by the old name
                out.append(_renamed_tool(tool, original, anthropic=anthropic))
            continue
        out.append(tool)
    return out


def _tool_choice_for_model(choice, spec: HarnessSpec, *, anthropic: bool):
    """The agent's tool_choice for the model: a forced disabled tool is dropped (None), a forced target is
    named as the model knows it."""
    back = {target: name for name, target in spec.routes().items()}
    disabled = spec.disabled()
    if not isinstance(choice, dict):
        return choice
    if anthropic:
        name = choice.get("name")
        if name in disabled:
            return None
        return {**choice, "name": back[name]} if name in back else choice
    function = choice.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    if name in disabled:
        return None
    if name not in back or not isinstance(function, dict):
        return choice
    return {**choice, "function": {**function, "name": back[name]}}


# ---- answers ------------------------------------------------------------------------------------------


def rewrite_message(message: dict, spec: HarnessSpec | None) -> dict:
    """An assistant message as the agent receives it: calls to routed tools renamed to their targets."""
    routes = spec.routes() if spec is not None else {}
    if not routes or not isinstance(message, dict):
        return message
    return _renamed_message(message, routes, anthropic=False)


def rewrite_response(payload: dict, spec: HarnessSpec | None) -> dict:
    """A whole answer (chat completion or Anthropic message) as the agent receives it (a new dict)."""
    routes = spec.routes() if spec is not None else {}
    if not routes or not isinstance(payload, dict):
        return payload
    out = copy.deepcopy(payload)
    for choice in out.get("choices") or []:
        if isinstance(choice, dict) and isinstance(choice.get("message"), dict):
            choice["message"] = _renamed_message(choice["message"], routes, anthropic=False)
    if isinstance(out.get("content"), list):  # an Anthropic message
        out["content"] = _renamed_message({"content": out["content"]}, routes, anthropic=True)["content"]
    return out


def rewrite_chunk(chunk: dict, spec: HarnessSpec | None) -> dict:
    """One stream chunk (chat delta, or an Anthropic `content_block_start`) as the agent receives it; the
    chunk given is not changed (the recording keeps what the model produced). A tool call's name arrives
    whole in one delta (as every OpenAI-compatible server sends it)."""
    routes = spec.routes() if spec is not None else {}
    if not routes or not isinstance(chunk, dict):
        return chunk
    block = chunk.get("content_block")
    if isinstance(block, dict) and block.get("type") == "tool_use" and block.get("name") in routes:
        return {**chunk, "content_block": {**block, "name": routes[block["name"]]}}
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        return chunk
    renamed_any, new_choices = False, []
    for choice in choices:
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if isinstance(delta, dict) and (delta.get("tool_calls") or delta.get("function_call")):
            new_delta = _renamed_message(delta, routes, anthropic=False)
            if new_delta != delta:
                choice, renamed_any = {**choice, "delta": new_delta}, True
        new_choices.append(choice)
    return {**chunk, "choices": new_choices} if renamed_any else chunk


def tool_versions(spec: HarnessSpec | None, tools) -> dict[str, str]:
    """`{"tool": "version"}` recorded in ATDP (`versions.tools`) for a request offering `tools`, keyed by the
    names the model sees: a routed tool has its route's version (the target's name when the route names
    none), another offered tool the harness's `tool_versions` entry; disabled tools are left out."""
    if spec is None:
        return {}
    offered = set(offered_tool_names(tools))
    routes, disabled = spec.routes(), spec.disabled()
    targets = set(routes.values())
    versions = {}
    for name, target in routes.items():
        if name in offered or target in offered:
            versions[name] = spec.tool_routing[name].get("version") or target
    for name in sorted(offered - disabled - targets - set(routes)):
        if name in spec.tool_versions:
            versions[name] = str(spec.tool_versions[name])
    return dict(sorted(versions.items()))
