"""Validation of ATDP v1 records: the published JSON Schema (Draft 2020-12, formats checked) plus the
cross-field rules JSON Schema cannot state. Every problem carries a field path such as
`steps[2].tokens.completion_logprobs` ("" is the record itself) and a short message that never
repeats the offending value at length."""

import calendar
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache

from jsonschema import Draft202012Validator, FormatChecker

from workers.atdp.schema import _schema

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", re.ASCII)
_DATE_TIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.\d+)?(?:[Zz]|[+-](\d{2}):(\d{2}))", re.ASCII
)


@dataclass(frozen=True, slots=True)
class Problem:
    """One reason a record is invalid: `path` names the field (`steps[2].tokens.completion_ids`,
    `rewards[0].step_id`; "" for the whole record or line)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


def validate_trajectory(record: object) -> list[Problem]:
    """All problems of one ATDP trajectory record; an empty list means valid. Pure and thread-safe."""
    problems = dict.fromkeys(_schema_problems(record))
    # A field the schema already rejected (say, a malformed uuid) needs no second, derived complaint.
    rejected_paths = {problem.path for problem in problems}
    for problem in _cross_field_problems(record):
        if problem.path not in rejected_paths:
            problems[problem] = None
    return list(problems)


def format_path(parts) -> str:
    """`["steps", 2, "tokens"]` → `steps[2].tokens`."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


# ---------------------------------------------------------------------------------------------------
# Formats


def _is_uuid(instance) -> bool:
    return not isinstance(instance, str) or _UUID.fullmatch(instance) is not None


def _is_date_time(instance) -> bool:
    """RFC 3339 `date-time` (section 5.6): a `T` separator and a required offset; fields in range
    (a leap second 60 is allowed)."""
    if not isinstance(instance, str):
        return True
    match = _DATE_TIME.fullmatch(instance)
    if match is None:
        return False
    year, month, day, hour, minute, second = (int(match[group]) for group in range(1, 7))
    if not (1 <= month <= 12 and 1 <= day <= calendar.monthrange(year, month)[1]):
        return False
    if hour > 23 or minute > 59 or second > 60:
        return False
    return not (match[7] is not None and (int(match[7]) > 23 or int(match[8]) > 59))


def _format_checker() -> FormatChecker:
    checker = FormatChecker(formats=())
    checker.checks("uuid")(_is_uuid)
    checker.checks("date-time")(_is_date_time)
    return checker


@cache
def _validator() -> Draft202012Validator:
    schema = _schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, format_checker=_format_checker())


# ---------------------------------------------------------------------------------------------------
# Fast acceptance
#
# jsonschema walks a five-step record in about 6 ms (some 300 schema nodes, each through its generic
# machinery), far too slow for bulk import and export. The schema file is therefore also compiled, once,
# into plain closures that answer only "certainly valid?". They are deliberately never more lenient than
# jsonschema (exact Python types, string-only enums); anything they reject goes through jsonschema,
# which alone words the problems, so an over-strict answer costs time, never correctness. Arrays whose
# items are plain bounded numbers (token ids, logprobs, versions) are checked in bulk. A schema keyword
# the compiler does not know disables the fast path entirely rather than being skipped.

_ANNOTATIONS = {"description", "title", "default", "$comment", "$schema", "$id", "$defs", "examples"}
_COMPILED_KEYWORDS = _ANNOTATIONS | {
    "$ref",
    "type",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minimum",
    "maximum",
    "minLength",
    "format",
    "anyOf",
}
_EXACT_TYPES = {
    "integer": (int,),
    "number": (int, float),
    "string": (str,),
    "object": (dict,),
    "array": (list,),
    "boolean": (bool,),
    "null": (type(None),),
}
_FORMATS = {"uuid": _is_uuid, "date-time": _is_date_time}
_SIMPLE_ITEM_KEYWORDS = {"type", "minimum", "maximum"} | _ANNOTATIONS
_SIMPLE_ARRAY_KEYWORDS = {"type", "items"} | _ANNOTATIONS


class _Unsupported(Exception):
    pass


def _resolve(node: dict) -> dict:
    while "$ref" in node:
        reference = node["$ref"]
        if not reference.startswith("#/$defs/"):
            raise _Unsupported(reference)
        node = _schema()["$defs"][reference.removeprefix("#/$defs/")]
    return node


def _bulk_items_check(items: dict) -> Callable[[list], bool] | None:
    """One pass over a whole array of plain bounded numbers, or None when `items` is anything richer."""
    if set(items) - _SIMPLE_ITEM_KEYWORDS or items.get("type") not in ("integer", "number"):
        return None
    allowed = frozenset(_EXACT_TYPES[items["type"]])
    low, high = items.get("minimum"), items.get("maximum")

    def check(values: list) -> bool:
        if not values:
            return True
        if not {*map(type, values)} <= allowed:
            return False
        if low is not None and min(values) < low:
            return False
        return high is None or max(values) <= high

    return check


def _all_of(checks: list[Callable[[object], bool]]) -> Callable[[object], bool]:
    if len(checks) == 1:
        return checks[0]

    def check(instance) -> bool:
        return all(one(instance) for one in checks)

    return check


def _compile(node: dict, compiled_refs: dict) -> Callable[[object], bool]:
    unknown = set(node) - _COMPILED_KEYWORDS
    if unknown:
        raise _Unsupported(", ".join(sorted(unknown)))
    checks = []
    if "$ref" in node:
        checks.append(_compile_ref(node["$ref"], compiled_refs))
    type_name = node.get("type")
    is_object_node = bool({"properties", "required", "additionalProperties"} & set(node))
    # "type": "object" / "array" is folded into the object / array check below (one call, not two).
    folded = (type_name == "object" and is_object_node) or (type_name == "array" and "items" in node)
    if "type" in node and not folded:
        types: list[str] = [type_name] if isinstance(type_name, str) else node["type"]
        exact = tuple({kind for name in types for kind in _EXACT_TYPES[name]})
        if len(exact) == 1:
            (only,) = exact
            checks.append(lambda instance: type(instance) is only)
        else:
            checks.append(lambda instance: type(instance) in exact)
    if "enum" in node or "const" in node:
        values = frozenset(node["enum"] if "enum" in node else [node["const"]])
        if not all(type(value) is str for value in values):
            raise _Unsupported("non-string enum")
        checks.append(lambda instance: type(instance) is str and instance in values)
    if "minimum" in node or "maximum" in node:
        checks.append(_bounds_check(node.get("minimum"), node.get("maximum")))
    if "minLength" in node:
        shortest = node["minLength"]
        checks.append(lambda instance: not isinstance(instance, str) or len(instance) >= shortest)
    if "format" in node:
        if node["format"] not in _FORMATS:
            raise _Unsupported(f"format {node['format']}")
        format_check = _FORMATS[node["format"]]
        checks.append(lambda instance: not isinstance(instance, str) or format_check(instance))
    if is_object_node:
        checks.append(_object_check(node, compiled_refs, must_be_object=type_name == "object"))
    if "items" in node:
        checks.append(_array_check(node["items"], compiled_refs, must_be_array=type_name == "array"))
    if "anyOf" in node:
        branches = [_compile(branch, compiled_refs) for branch in node["anyOf"]]
        checks.append(lambda instance: any(branch(instance) for branch in branches))
    return _all_of(checks) if checks else (lambda instance: True)


def _compile_ref(reference: str, compiled_refs: dict) -> Callable[[object], bool]:
    if reference not in compiled_refs:
        compiled_refs[reference] = None  # a cycle reaches the late-bound lookup below
        compiled_refs[reference] = _compile(_resolve({"$ref": reference}), compiled_refs)
    compiled = compiled_refs[reference]
    return compiled if compiled is not None else (lambda instance: compiled_refs[reference](instance))


def _bounds_check(low, high) -> Callable[[object], bool]:
    def check(instance) -> bool:
        if type(instance) in (int, float):
            return (low is None or instance >= low) and (high is None or instance <= high)
        # booleans are not numbers to JSON Schema; other number-like types are left to jsonschema
        return isinstance(instance, bool) or not isinstance(instance, (int, float))

    return check


def _object_check(node: dict, compiled_refs: dict, *, must_be_object: bool) -> Callable[[object], bool]:
    required = frozenset(node.get("required", ()))
    properties = {
        name: _compile(schema, compiled_refs) for name, schema in node.get("properties", {}).items()
    }
    additional = node.get("additionalProperties", True)
    closed = additional is False
    allowed = frozenset(properties)
    additional_check = None if additional in (True, False) else _compile(additional, compiled_refs)

    def check(instance) -> bool:
        if type(instance) is not dict:
            # the keywords do not apply to non-objects; dict subclasses are left to jsonschema
            return not must_be_object and not isinstance(instance, dict)
        keys = instance.keys()
        if not required <= keys or (closed and not keys <= allowed):
            return False
        for name, value in instance.items():
            property_check = properties.get(name)
            if property_check is not None:
                if not property_check(value):
                    return False
            elif additional_check is not None and not additional_check(value):
                return False
        return True

    return check


def _array_check(items: dict, compiled_refs: dict, *, must_be_array: bool) -> Callable[[object], bool]:
    bulk = _bulk_items_check(_resolve(items))
    each = _compile(items, compiled_refs)

    def check(instance) -> bool:
        if type(instance) is not list:
            return not must_be_array and not isinstance(instance, list)
        if bulk is not None:
            return bulk(instance)
        return all(each(value) for value in instance)

    return check


@cache
def _fast_check() -> Callable[[object], bool] | None:
    """The compiled acceptance check, or None when the schema uses a keyword the compiler lacks."""
    try:
        return _compile(_schema(), {})
    except _Unsupported:
        return None


@cache
def _token_array_checks() -> dict[str, Callable[[list], bool]]:
    """Bulk checks for the plain-number arrays of Tokens, used to shrink a rejected record before the
    (slow, per-element) jsonschema pass: arrays that pass are emptied, failing ones stay for reporting."""
    checks = {}
    for name, array_schema in _schema()["$defs"]["Tokens"]["properties"].items():
        types = array_schema.get("type")
        types = [types] if isinstance(types, str) else types or []
        if "array" not in types or set(array_schema) - _SIMPLE_ARRAY_KEYWORDS or "items" not in array_schema:
            continue
        bulk = _bulk_items_check(_resolve(array_schema["items"]))
        if bulk is not None:
            checks[name] = bulk
    return checks


def _without_checked_token_arrays(record):
    steps = record.get("steps") if isinstance(record, dict) else None
    if not isinstance(steps, list):
        return record
    checks = _token_array_checks()
    replaced_steps = None
    for position, step in enumerate(steps):
        tokens = step.get("tokens") if isinstance(step, dict) else None
        if not isinstance(tokens, dict):
            continue
        replaced_tokens = None
        for name, check in checks.items():
            values = tokens.get(name)
            if type(values) is list and values and check(values):
                if replaced_tokens is None:
                    replaced_tokens = dict(tokens)
                replaced_tokens[name] = []
        if replaced_tokens is not None:
            if replaced_steps is None:
                replaced_steps = list(steps)
            replaced_steps[position] = {**step, "tokens": replaced_tokens}
    return record if replaced_steps is None else {**record, "steps": replaced_steps}


# ---------------------------------------------------------------------------------------------------
# Schema problems


def _schema_problems(record) -> Iterator[Problem]:
    fast_check = _fast_check()
    if fast_check is not None and fast_check(record):
        return
    for error in _validator().iter_errors(_without_checked_token_arrays(record)):
        yield from _problems_from(error)


def _short(value) -> str:
    text = json.dumps(value, default=repr)
    return text if len(text) <= 60 else text[:57] + "..."


_JSON_TYPE_NAMES = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
    type(None): "null",
}


def _type_name(value) -> str:
    return _JSON_TYPE_NAMES.get(type(value), type(value).__name__)


def _problems_from(error) -> Iterator[Problem]:
    path = list(error.absolute_path)
    where = format_path(path)
    keyword, expected, instance = error.validator, error.validator_value, error.instance
    if keyword in ("anyOf", "oneOf") and error.context:
        yield from _branch_problems(error, where)
    elif keyword == "required":
        for name in expected:
            if isinstance(instance, dict) and name not in instance:
                yield Problem(format_path([*path, name]), "is required")
    elif keyword == "additionalProperties" and expected is False:
        known = error.schema.get("properties", {})
        for name in instance:
            if name not in known:
                yield Problem(format_path([*path, name]), "is not a field of ATDP v1")
    elif keyword == "type":
        wanted = " or ".join([expected] if isinstance(expected, str) else expected)
        yield Problem(where, f"must be {wanted}, not {_type_name(instance)}")
    elif keyword == "enum":
        yield Problem(where, f"must be one of {', '.join(map(str, expected))}; got {_short(instance)}")
    elif keyword == "const":
        yield Problem(where, f"must be {_short(expected)}; got {_short(instance)}")
    elif keyword == "format":
        yield Problem(
            where,
            f"must be a {'uuid' if expected == 'uuid' else 'RFC 3339 ' + expected}; got {_short(instance)}",
        )
    elif keyword == "minimum":
        yield Problem(where, f"must be >= {expected}; got {_short(instance)}")
    elif keyword == "maximum":
        yield Problem(where, f"must be <= {expected}; got {_short(instance)}")
    elif keyword == "minLength" and expected == 1:
        yield Problem(where, "must not be empty")
    else:
        message = error.message
        yield Problem(where, message if len(message) <= 200 else message[:197] + "...")


def _branch_problems(error, where: str) -> Iterator[Problem]:
    """For `anyOf: [X, null]`-style unions: when the value has the type of exactly one branch, report that
    branch's own problems (so paths reach inside it); otherwise say which types were expected."""
    branches: dict[int, list] = {}
    for sub_error in error.context:
        branches.setdefault(sub_error.relative_schema_path[0], []).append(sub_error)
    wrong_type = {
        index: errors
        for index, errors in branches.items()
        if len(errors) == 1 and errors[0].validator == "type" and not errors[0].relative_path
    }
    matching = [errors for index, errors in branches.items() if index not in wrong_type]
    if len(matching) == 1:
        for sub_error in matching[0]:
            yield from _problems_from(sub_error)
    elif len(wrong_type) == len(branches):
        wanted: list[str] = []
        for (sub_error,) in wrong_type.values():
            value = sub_error.validator_value
            wanted.extend([value] if isinstance(value, str) else value)
        yield Problem(where, f"must be {' or '.join(wanted)}, not {_type_name(error.instance)}")
    else:
        yield Problem(where, "matches none of the allowed forms")


# ---------------------------------------------------------------------------------------------------
# Cross-field rules


def _cross_field_problems(record) -> Iterator[Problem]:
    """Rules JSON Schema cannot state. Written defensively: a field of the wrong type is the schema's
    problem and is skipped here."""
    if not isinstance(record, dict):
        return
    if record.get("ended_at", "") is None and record.get("status") in ("complete", "aborted"):
        yield Problem("ended_at", f"may be null only while status is open (status is {record['status']})")
    steps = record.get("steps")
    step_positions: dict[str, int] = {}
    for position, step in enumerate(steps if isinstance(steps, list) else []):
        if isinstance(step, dict):
            yield from _step_problems(step, position, step_positions)
    rewards = record.get("rewards")
    reward_positions: dict[str, int] = {}
    for position, reward in enumerate(rewards if isinstance(rewards, list) else []):
        if isinstance(reward, dict):
            yield from _reward_problems(reward, position, step_positions, reward_positions)


def _step_problems(step: dict, position: int, step_positions: dict[str, int]) -> Iterator[Problem]:
    where = f"steps[{position}]"
    index = step.get("index")
    if type(index) is int and index != position:
        yield Problem(
            f"{where}.index", f"must be {position}: step indexes run 0..n-1 in list order; got {index}"
        )
    parent = step.get("parent_step_id")
    if isinstance(parent, str) and parent not in step_positions:
        yield Problem(f"{where}.parent_step_id", "must name an earlier step of this trajectory")
    step_id = step.get("step_id")
    if isinstance(step_id, str):
        if step_id in step_positions:
            yield Problem(f"{where}.step_id", f"repeats steps[{step_positions[step_id]}].step_id")
        else:
            step_positions[step_id] = position
    tokens = step.get("tokens")
    kind = step.get("kind")
    if tokens is not None and isinstance(kind, str) and kind != "llm_call":
        yield Problem(f"{where}.tokens", f"must be null unless kind is llm_call (kind is {kind})")
    if isinstance(tokens, dict):
        yield from _token_length_problems(tokens, f"{where}.tokens")


def _token_length_problems(tokens: dict, where: str) -> Iterator[Problem]:
    completion_ids = tokens.get("completion_ids")
    if not isinstance(completion_ids, list):
        return
    for name in ("completion_logprobs", "completion_versions"):
        values = tokens.get(name)
        if isinstance(values, list) and len(values) != len(completion_ids):
            yield Problem(
                f"{where}.{name}", f"has {len(values)} items; completion_ids has {len(completion_ids)}"
            )
    loss_mask, prompt_ids = tokens.get("loss_mask"), tokens.get("prompt_ids")
    if isinstance(loss_mask, list) and isinstance(prompt_ids, list):
        expected = len(prompt_ids) + len(completion_ids)
        if len(loss_mask) != expected:
            yield Problem(
                f"{where}.loss_mask",
                f"has {len(loss_mask)} items; it covers prompt_ids then completion_ids ({expected} tokens)",
            )


def _reward_problems(
    reward: dict, position: int, step_positions: dict[str, int], reward_positions: dict[str, int]
) -> Iterator[Problem]:
    where = f"rewards[{position}]"
    target, step_id = reward.get("target"), reward.get("step_id")
    if target == "step":
        if "step_id" in reward and step_id is None:
            yield Problem(f"{where}.step_id", "is required when target is step")
        elif isinstance(step_id, str) and step_id not in step_positions:
            yield Problem(f"{where}.step_id", "names no step of this trajectory")
    elif target == "trajectory" and step_id is not None:
        yield Problem(f"{where}.step_id", "must be null when target is trajectory")
    value = reward.get("value")
    if reward.get("kind") == "boolean" and type(value) in (int, float) and value not in (0, 1):
        yield Problem(f"{where}.value", f"must be 0 or 1 for a boolean reward; got {_short(value)}")
    reward_id = reward.get("reward_id")
    if isinstance(reward_id, str):
        if reward_id in reward_positions:
            yield Problem(f"{where}.reward_id", f"repeats rewards[{reward_positions[reward_id]}].reward_id")
        else:
            reward_positions[reward_id] = position
