"""Validation of ATDP v1 records: the published JSON Schema (Draft 2020-12, formats checked) plus the
cross-field rules JSON Schema cannot state. Every problem carries a field path such as
`steps[2].tokens.completion_logprobs` ("" is the record itself) and a short message that never
repeats the offending value at length."""

import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

from jsonschema import Draft202012Validator, FormatChecker

from workers.atdp.formats import is_date_time, is_uuid
from workers.atdp.schema import _schema
from workers.atdp.schema_compiler import fast_check, without_checked_token_arrays


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
# Schema problems: a record the compiled fast path (workers.atdp.schema_compiler) accepts has none;
# jsonschema words the problems of any other


def _format_checker() -> FormatChecker:
    checker = FormatChecker(formats=())
    checker.checks("uuid")(is_uuid)
    checker.checks("date-time")(is_date_time)
    return checker


@cache
def _validator() -> Draft202012Validator:
    schema = _schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, format_checker=_format_checker())


def _schema_problems(record) -> Iterator[Problem]:
    accepts = fast_check()
    if accepts is not None and accepts(record):
        return
    for error in _validator().iter_errors(without_checked_token_arrays(record)):
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
