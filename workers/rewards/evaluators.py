"""Rule-based evaluators: a trajectory's outcome in, a reward value out. Pure except `program_check`, which
runs an operator-installed program from a fixed directory with the outcome as JSON on stdin.

A tenant's `regex` runs as tenant PII patterns do (workers.pii.patterns: checked when compiled, matched on
the `regex` engine with a timeout): a pattern that backtracks on an answer is stopped after PATTERN_SECONDS
and the evaluator cannot judge (EvaluatorError), instead of holding the worker."""

import json
import math
import os
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

import jsonschema

from workers.pii.base import InvalidPattern
from workers.pii.patterns import tenant_regex, tenant_regex_search

PATTERN_SECONDS = 1.0  # one tenant pattern on one answer
MAX_PROGRAM_SECONDS = 60.0  # a program check's `timeout_s` at most (default 10)


@dataclass(frozen=True)
class ToolCall:
    call_id: str
    name: str
    succeeded: bool | None  # None: no result recorded
    arguments: str = ""  # as the model wrote them (JSON text)
    result: str = ""  # the tool's answer as the agent sent it back ("" when none was recorded)


@dataclass(frozen=True)
class Outcome:
    task_id: str = ""
    final_text: str = ""
    task: str = ""  # the first user message of the trajectory: what the agent was asked
    tool_calls: tuple[ToolCall, ...] = ()
    environment: dict = field(default_factory=dict)


@dataclass(frozen=True)
class EvaluatorResult:
    value: float
    label: str = ""


class EvaluatorError(Exception):
    """The evaluator could not judge (bad config, program missing or timed out): no reward is stored."""


def _normalized(text: str) -> str:
    return " ".join(text.strip().lower().split())


def _expected(outcome: Outcome, config: dict) -> str:
    by_task = config.get("expected_by_task") or {}
    if outcome.task_id in by_task:
        return str(by_task[outcome.task_id])
    if "expected" not in config:
        raise EvaluatorError(f"no expected answer for task {outcome.task_id!r}")
    return str(config["expected"])


def exact_match(outcome: Outcome, config: dict) -> EvaluatorResult:
    """1 when the final answer equals the expected one (whitespace and case folded unless `strict`)."""
    expected = _expected(outcome, config)
    same = (
        (outcome.final_text == expected)
        if config.get("strict")
        else (_normalized(outcome.final_text) == _normalized(expected))
    )
    return EvaluatorResult(1.0 if same else 0.0, "match" if same else "no match")


def regex_match(outcome: Outcome, config: dict) -> EvaluatorResult:
    """1 when the pattern is found in the final answer (`fullmatch: true` for the whole answer)."""
    if "pattern" not in config:
        raise EvaluatorError("bad pattern: config.pattern is required")
    try:
        pattern = tenant_regex(config["pattern"], name="pattern", ignore_case=bool(config.get("ignore_case")))
    except InvalidPattern as error:
        raise EvaluatorError(f"bad pattern: {error.reason}") from None
    whole = bool(config.get("fullmatch"))
    text = outcome.final_text.strip() if whole else outcome.final_text
    try:
        found = tenant_regex_search(pattern, text, seconds=PATTERN_SECONDS, whole=whole)
    except TimeoutError:
        raise EvaluatorError(
            f"the pattern ran longer than {PATTERN_SECONDS:g} s on this answer and was stopped (it backtracks "
            "on this text: avoid overlapping repetition such as (a|aa)+)"
        ) from None
    return EvaluatorResult(1.0 if found else 0.0, "match" if found else "no match")


def json_schema_valid(outcome: Outcome, config: dict) -> EvaluatorResult:
    """1 when the final answer parses as JSON and satisfies the schema."""
    schema = config.get("schema")
    if not isinstance(schema, dict):
        raise EvaluatorError("config.schema must be a JSON Schema object")
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as error:
        raise EvaluatorError(f"invalid schema: {error.message}") from None
    try:
        document = json.loads(outcome.final_text)
    except ValueError:
        return EvaluatorResult(0.0, "not JSON")
    problem = next(iter(jsonschema.Draft202012Validator(schema).iter_errors(document)), None)
    return (
        EvaluatorResult(0.0, f"invalid: {problem.message}"[:200])
        if problem
        else EvaluatorResult(1.0, "valid")
    )


def tool_call_succeeded(outcome: Outcome, config: dict) -> EvaluatorResult:
    """1 when the agent called the tool (`tool`, or any) and every such call's result succeeded."""
    calls = [call for call in outcome.tool_calls if not config.get("tool") or call.name == config["tool"]]
    if not calls:
        return EvaluatorResult(0.0, "no tool call")
    if any(call.succeeded is not True for call in calls):
        return EvaluatorResult(0.0, "a tool call failed or has no result")
    return EvaluatorResult(1.0, f"{len(calls)} tool calls succeeded")


def program_check(outcome: Outcome, config: dict, *, programs_dir: str | None = None) -> EvaluatorResult:
    """Runs `argv` (its program must live in `programs_dir`, which the caller reads from the setting
    AREAL_EVALUATOR_PROGRAMS_DIR; none: refused) with the outcome as JSON on stdin. Exit 0 passes (1.0), any
    other fails (0.0); a number on the last stdout line is taken as the value instead."""
    directory = programs_dir or ""
    argv = config.get("argv")
    if not directory:
        raise EvaluatorError("program evaluators need AREAL_EVALUATOR_PROGRAMS_DIR on the worker")
    if not isinstance(argv, list) or not argv or not all(isinstance(part, str) for part in argv):
        raise EvaluatorError("config.argv must be a non-empty list of strings")
    root = Path(directory).resolve()
    program = (root / argv[0]).resolve()
    if root not in program.parents or not program.is_file() or not os.access(program, os.X_OK):
        raise EvaluatorError(f"{argv[0]!r} is not an executable in the programs directory")
    try:
        finished = subprocess.run(
            [str(program), *argv[1:]],
            input=json.dumps(asdict(outcome)),
            capture_output=True,
            text=True,
            timeout=_program_seconds(config.get("timeout_s", 10)),
            cwd=root,
            check=False,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        )
    except subprocess.TimeoutExpired:
        raise EvaluatorError(f"{argv[0]} timed out") from None
    lines = finished.stdout.strip().splitlines()
    try:
        value = float(lines[-1]) if lines else None
    except ValueError:
        value = None
    if value is not None and math.isfinite(value):
        return EvaluatorResult(value, f"exit {finished.returncode}")
    return EvaluatorResult(1.0 if finished.returncode == 0 else 0.0, f"exit {finished.returncode}")


def _program_seconds(value) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise EvaluatorError("config.timeout_s must be a number of seconds") from None
    if not 0 < seconds <= MAX_PROGRAM_SECONDS:  # NaN too
        raise EvaluatorError(f"config.timeout_s must be above 0 and at most {MAX_PROGRAM_SECONDS:g}")
    return seconds


EVALUATORS = {
    "exact_match": exact_match,
    "regex": regex_match,
    "json_schema": json_schema_valid,
    "tool_call_succeeded": tool_call_succeeded,
    "program": program_check,
}
# The LLM judge is no function of the outcome alone: it calls a model through the gateway (apps.loop.judging;
# its prompt and parsing are pure, in workers.rewards.judge).
LLM_JUDGE = "llm_judge"
KINDS = (*EVALUATORS, LLM_JUDGE)


def run_evaluator(
    kind: str, config: dict, outcome: Outcome, *, programs_dir: str | None = None
) -> EvaluatorResult:
    """`programs_dir`: where a `program` evaluator's programs live (AREAL_EVALUATOR_PROGRAMS_DIR)."""
    if kind == LLM_JUDGE:
        raise EvaluatorError("an llm_judge evaluator runs through the gateway (apps.loop.judging)")
    if kind not in EVALUATORS:
        raise EvaluatorError(f"unknown evaluator kind {kind!r}")
    if kind == "program":
        return program_check(outcome, config, programs_dir=programs_dir)
    return EVALUATORS[kind](outcome, config)
