"""validate.py's hand-written fast path against fastjsonschema (issue 17: could the compiler be replaced?).

`validate_trajectory` answers "certainly valid?" with closures compiled from the schema and asks jsonschema
for the problems only when they say no. The candidate replacement keeps everything but that fast path,
which becomes a fastjsonschema validator compiled from the same schema with the same formats. These tests
build some 1,200 records from the fixtures, valid ones and ones mutated at every field (wrong types, missing
required fields, extra fields, values out of range, enum and format violations, nested), and assert that
both give the same problems and that fastjsonschema's first error names a path the problems share.

They agree on every JSON record tried. They differ on Python values JSON cannot produce: fastjsonschema takes a
tuple as an array, jsonschema (and so `validate_trajectory`) does not (`test_the_two_differ_on_tuples`).
The compiler stays: fastjsonschema alone is 12 to 16 times slower on valid records, the common case (it
checks token arrays one element at a time, with a function call and a formatted path per element).
Run after the bulk token-array checks that validate.py already makes for its error path it is level with
the compiler, but it still takes tuples as arrays, so `validate_trajectory` would answer differently for
records built in Python. Figures: bench/README.md, "ATDP validation: fastjsonschema".
"""

import copy
import functools
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from unittest import mock

import pytest

from tests.workers.atdp.fixtures import make_reward, make_step, make_trajectory, new_id
from workers.atdp import Problem, schema_compiler, validate_trajectory
from workers.atdp import validate as validate_module
from workers.atdp.formats import is_date_time, is_uuid
from workers.atdp.schema import load_schema

fastjsonschema = pytest.importorskip("fastjsonschema")

# Values put in place of a field: one of each JSON type, values at and past the schema's bounds, and
# strings that break its formats and enums.
REPLACEMENTS = (
    None,
    True,
    False,
    0,
    -1,
    1.0,
    1.5,
    -0.5,
    2**31,
    -(2**31) - 1,
    float("nan"),
    float("inf"),
    "",
    "x",
    "bogus_enum_value",
    "not-a-uuid",
    "2025-02-30T10:00:00Z",
    "2025-03-04 10:15:00",
    "6f1c0a1e-8a40-4f7a-9a1e-1b2c3d4e5f60",
    "2025-03-04T10:15:00Z",
    [],
    [1],
    ["x"],
    [{}],
    {},
    {"name": "x"},
)

# Values that break a field of the type it holds now: its format, its enum, its bounds, its integer type.
TARGETED = {
    str: ("not-a-uuid", "2025-02-30T10:00:00Z", "bogus_enum_value", ""),
    int: (-1, 2**31, 1.5),
    float: (-0.5, "1.0"),
}


@functools.cache
def _fastjsonschema_validator():
    return fastjsonschema.compile(
        load_schema(),
        formats={"uuid": is_uuid, "date-time": is_date_time},
    )


def fastjsonschema_first_error(record: object):
    """fastjsonschema's first error, or None when it accepts the record."""
    try:
        _fastjsonschema_validator()(record)
    except fastjsonschema.JsonSchemaValueException as error:
        return error
    return None


def fastjsonschema_validate_trajectory(record: object) -> list[Problem]:
    """`validate_trajectory` with fastjsonschema as its fast acceptance check: what the switch would give."""

    def accepts(instance) -> bool:
        return fastjsonschema_first_error(instance) is None

    with mock.patch.object(validate_module, "fast_check", return_value=accepts):
        return validate_trajectory(record)


def fastjsonschema_path(error) -> str:
    """``data.steps[0].tokens`` → ``steps[0].tokens`` (validate.py's path form)."""
    return error.name.removeprefix("data").removeprefix(".")


def _within(path: str, ancestor: str) -> bool:
    return not ancestor or path == ancestor or path.startswith((ancestor + ".", ancestor + "["))


# --- records -------------------------------------------------------------------------------------------


def base_records() -> list[dict]:
    """Valid records: the fixture trajectory, an open one, one without rewards, one with a loss mask and a
    retokenized step, one with a step reward on a later step, one with an extra env_event step."""
    complete = make_trajectory()
    with_mask = make_trajectory()
    tokens = with_mask["steps"][0]["tokens"]
    tokens["loss_mask"] = [0] * len(tokens["prompt_ids"]) + [1] * len(tokens["completion_ids"])
    tokens["retokenized"] = True
    later_reward = make_trajectory()
    later_reward["rewards"].append(
        make_reward(target="step", step_id=later_reward["steps"][3]["step_id"], value=-2.5)
    )
    extra_step = make_trajectory()
    extra_step["steps"].append(
        make_step(5, "env_event", parent_step_id=extra_step["steps"][4]["step_id"], state={"any": [1, None]})
    )
    return [
        complete,
        make_trajectory(status="open", ended_at=None),
        make_trajectory(rewards=[], task_id=None, group_id=None),
        with_mask,
        later_reward,
        extra_step,
    ]


def field_paths(value: object, path: tuple = ()) -> Iterator[tuple]:
    """Every field and array item of a record; of a long array only the first and last items."""
    if path:
        yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from field_paths(item, (*path, key))
    elif isinstance(value, list):
        indexes = range(len(value)) if len(value) <= 3 else (0, len(value) - 1)
        for index in indexes:
            yield from field_paths(value[index], (*path, index))


def _parent(record: dict, path: tuple):
    for part in path[:-1]:
        record = record[part]
    return record


def mutations(record: dict, rng: random.Random, *, under: tuple = ()) -> Iterator[tuple[str, dict]]:
    """(description, mutated copy): each field (of those under `under`) replaced by one of REPLACEMENTS
    and by the values that break its kind of field (TARGETED), deleted, or given an extra item; each
    object given an unknown field."""
    for path in list(field_paths(record)):
        if path[: len(under)] != under:
            continue
        value = _parent(record, path)[path[-1]]
        for replacement in [rng.choice(REPLACEMENTS), *TARGETED.get(type(value), ())]:
            mutated = copy.deepcopy(record)
            _parent(mutated, path)[path[-1]] = copy.deepcopy(replacement)
            yield f"{path} = {replacement!r}", mutated
        parent = _parent(record, path)
        mutated = copy.deepcopy(record)
        if isinstance(parent, dict):
            del _parent(mutated, path)[path[-1]]
            yield f"del {path}", mutated
        else:
            _parent(mutated, path).append(rng.choice(REPLACEMENTS))
            yield f"append to {path[:-1]}", mutated
        if isinstance(value, dict):
            mutated = copy.deepcopy(record)
            _parent(mutated, path)[path[-1]]["unknown_field"] = 1
            yield f"{path}.unknown_field", mutated
    mutated = copy.deepcopy(record)
    mutated["unknown_field"] = "x"
    yield "unknown top-level field", mutated


def cases() -> list[tuple[str, object]]:
    """The base records, every field of the first mutated, the fields that the others add or change
    mutated, records broken in three places at once, and records that are no object at all."""
    rng = random.Random(17)
    records = base_records()
    found: list[tuple[str, object]] = [
        (f"valid record {number}", record) for number, record in enumerate(records)
    ]
    distinctive = {1: ("ended_at",), 3: ("steps", 0, "tokens"), 4: ("rewards", 2), 5: ("steps", 5)}
    for number, record in enumerate(records):
        if number == 0 or number in distinctive:
            under = distinctive.get(number, ())
            found.extend(
                (f"record {number}: {what}", mutated) for what, mutated in mutations(record, rng, under=under)
            )
    paths = list(field_paths(records[0]))
    for number in range(100):
        mutated = copy.deepcopy(records[0])
        for path in rng.sample(paths, 3):
            try:
                _parent(mutated, path)[path[-1]] = copy.deepcopy(rng.choice(REPLACEMENTS))
            except (KeyError, IndexError, TypeError):  # an earlier change removed the field's parent
                continue
        found.append((f"triple mutation {number}", mutated))
    found.extend([("not an object", []), ("a string", "record"), ("null", None), ("empty object", {})])
    return found


@dataclass(frozen=True)
class Verdicts:
    current: list[Problem]
    switched: list[Problem]
    schema_valid: bool
    first_error: object  # fastjsonschema's, on the record
    first_error_after_bulk_checks: object  # fastjsonschema's, on the record with checked token arrays emptied


@pytest.fixture(scope="module")
def verdicts() -> list[tuple[str, Verdicts]]:
    """Each case through both validators, once for all the tests below (jsonschema is slow on bad records)."""
    found = []
    for what, record in cases():
        current = validate_trajectory(record)
        switched = fastjsonschema_validate_trajectory(record)
        schema_valid = not current or not any(True for _ in validate_module._schema_problems(record))
        first_error = fastjsonschema_first_error(record)
        shrunk = schema_compiler.without_checked_token_arrays(record)
        verdict = Verdicts(current, switched, schema_valid, first_error, fastjsonschema_first_error(shrunk))
        found.append((what, verdict))
    return found


# --- tests ---------------------------------------------------------------------------------------------


def test_the_cases_cover_valid_and_invalid_records_of_every_kind(verdicts):
    valid = [what for what, verdict in verdicts if not verdict.current]
    invalid = [verdict for _, verdict in verdicts if verdict.current]
    assert len(verdicts) > 600
    assert len(valid) > 100  # the base records and harmless mutations (inside open objects)
    assert len(invalid) > 400
    messages = " ".join(problem.message for verdict in invalid for problem in verdict.current)
    for kind in (
        "is required",
        "is not a field of ATDP v1",
        "must be one of",
        "must be >=",
        "must be a uuid",
    ):
        assert kind in messages
    assert any(not verdict.schema_valid for verdict in invalid)
    assert any(verdict.schema_valid for verdict in invalid)  # cross-field problems only


def test_fastjsonschema_gives_the_same_problems_as_the_hand_written_fast_path(verdicts):
    different = [(what, verdict) for what, verdict in verdicts if verdict.current != verdict.switched]
    assert different == []


def test_fastjsonschema_accepts_exactly_the_records_jsonschema_accepts(verdicts):
    different = [what for what, verdict in verdicts if (verdict.first_error is None) != verdict.schema_valid]
    assert different == []


def test_fastjsonschema_after_the_bulk_token_checks_accepts_exactly_the_records_jsonschema_accepts(verdicts):
    different = [
        what
        for what, verdict in verdicts
        if (verdict.first_error_after_bulk_checks is None) != verdict.schema_valid
    ]
    assert different == []


def test_fastjsonschema_first_error_names_a_path_the_problems_share(verdicts):
    for what, verdict in verdicts:
        if verdict.first_error is None:
            continue
        first = fastjsonschema_path(verdict.first_error)
        paths = [problem.path for problem in verdict.current]
        assert any(_within(path, first) or _within(first, path) for path in paths), (what, first, paths)


def test_a_json_round_trip_keeps_the_verdict():
    """The cases are JSON values (NaN and infinity as Python's json writes them): what the tests compare
    is what an import reads."""
    for what, record in cases()[:150]:
        again = json.loads(json.dumps(record))
        assert (validate_trajectory(again) == []) == (validate_trajectory(record) == []), what


def test_the_two_differ_on_tuples():
    """A Python tuple is no JSON array to jsonschema, but is one to fastjsonschema: a caller handing
    `validate_trajectory` a record built in Python with tuples would see it pass after a switch."""
    record = make_trajectory()
    record["steps"][0]["tokens"]["prompt_ids"] = tuple(record["steps"][0]["tokens"]["prompt_ids"])
    record["rewards"] = tuple(record["rewards"])

    assert [problem.path for problem in validate_trajectory(record)] == [
        "steps[0].tokens.prompt_ids",
        "rewards",
    ]
    assert fastjsonschema_first_error(record) is None
    assert fastjsonschema_first_error(schema_compiler.without_checked_token_arrays(record)) is None


def test_a_new_id_is_a_uuid_to_both():
    record = make_trajectory(trajectory_id=new_id())
    assert validate_trajectory(record) == []
    assert fastjsonschema_first_error(record) is None
