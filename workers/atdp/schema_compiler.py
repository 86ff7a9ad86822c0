"""The fast acceptance of ATDP v1 records: the schema file compiled, once, into plain closures that answer only
"certainly valid?" (`fast_check`), and the bulk checks of the token arrays that shrink a rejected record before
jsonschema words its problems (`without_checked_token_arrays`). workers.atdp.validate uses both.

jsonschema walks a five-step record in about 6 ms (some 300 schema nodes, each through its generic
machinery), far too slow for bulk import and export. The closures are deliberately never more lenient than
jsonschema (exact Python types, string-only enums); anything they reject goes through jsonschema, which
alone words the problems, so an over-strict answer costs time, never correctness. Arrays whose items are
plain bounded numbers (token ids, logprobs, versions) are checked in bulk. A schema keyword the compiler does
not know disables the fast path entirely rather than being skipped."""

from collections.abc import Callable
from functools import cache

from workers.atdp.formats import is_date_time, is_uuid
from workers.atdp.schema import _schema

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
_FORMATS = {"uuid": is_uuid, "date-time": is_date_time}
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
def fast_check() -> Callable[[object], bool] | None:
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


def without_checked_token_arrays(record):
    """The record with every token array that passes its bulk check emptied (a copy; the record is not
    changed), so the slow jsonschema pass that words a rejected record's problems walks only the rest."""
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
