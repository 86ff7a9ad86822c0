"""A case's answer scored by BFCL's own checkers.

Single-turn categories: the one reply's tool calls go to BFCL's AST checker (`simple_python`, `multiple`,
`parallel`, `parallel_multiple`, with the category telling it which comparison to make). `irrelevance` has no
ground truth: it is won by calling nothing; any call loses, a malformed one included (BFCL's runner counts a
call it cannot decode as no call; here the model must not try).

`multi_turn_base`: each turn's steps' calls (a step being one reply; replies without calls drop out, as in
BFCL's runner) go to BFCL's multi-turn checker, which executes them and the ground truth from the case's
initial state and compares the API instances' states and the calls' results turn by turn. The checker is
asked about every prefix of the conversation, so each turn gets its own verdict (`Score.turns`: the
conversation is right through that turn), which the agent posts as that turn's steps' rewards. A malformed
call fails its turn and the ones after it; a turn the agent did not finish (step limit, transport error) fails
like BFCL's force-terminated entries.

Nothing here raises on the model's output: every failure is a `Score` with its reason.
"""

import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass

from workers.envs.bfcl import checkers
from workers.envs.bfcl.calls import Malformed, ToolCall, ast_output, call_string, checker_entry
from workers.envs.bfcl.cases import Case

REASON_LIMIT = 2000


@dataclass(frozen=True)
class Score:
    valid: bool
    reason: str  # "ok", or what BFCL's checker (or the decoding) said was wrong
    error_type: str = ""  # BFCL's error_type, or ours: no_call, unknown_function, malformed_arguments, ...
    turns: tuple[bool, ...] = ()  # multi-turn: right through each turn

    @property
    def value(self) -> float:
        return 1.0 if self.valid else 0.0


def _text(detail) -> str:
    text = detail if isinstance(detail, str) else json.dumps(detail, default=str, ensure_ascii=False)
    return text[:REASON_LIMIT]


def score(case: Case, answer) -> Score:
    """`answer`: a single-turn case's tool calls (a list of ToolCall); a multi-turn case's turns, each a
    list of steps, each a list of ToolCall."""
    if case.multi_turn:
        return score_multi_turn(case, answer)
    return score_single_turn(case, answer)


def score_single_turn(case: Case, calls: Sequence[ToolCall]) -> Score:
    if case.category == "irrelevance":
        if not calls:
            return Score(True, "ok")
        names = ", ".join(repr(call.name) for call in calls)
        return Score(False, f"called {names}, and no function fits", "irrelevance_error:called")
    if not calls:
        return Score(False, "no tool call", "no_call")
    decoded = []
    for call in calls:
        output = ast_output(case, call)
        if isinstance(output, Malformed):
            return Score(False, output.reason, output.kind)
        decoded.append(output)
    try:
        result = checkers.ast_check(
            functions=copy.deepcopy(list(case.functions)),
            model_output=decoded,
            ground_truth=copy.deepcopy(case.ground_truth),
            category=case.category,
        )
    except Exception as error:  # the checker's own failure on odd input (a type it does not expect)
        return Score(False, f"checker error: {type(error).__name__}: {error}"[:REASON_LIMIT], "checker_error")
    if result.get("valid"):
        return Score(True, "ok")
    return Score(False, _text(result.get("error", "")), str(result.get("error_type", "")))


def score_multi_turn(case: Case, turns: Sequence[Sequence[Sequence[ToolCall]]]) -> Score:
    total = len(case.turns)
    decoded: list[list[list[str]]] = []
    malformed: tuple[int, Malformed] | None = None
    for turn, steps in enumerate(list(turns)[:total]):
        turn_steps = []
        for step in steps:
            strings = []
            for call in step:
                string = call_string(case, call)
                if isinstance(string, Malformed):
                    malformed = (turn, string)
                    break
                strings.append(string)
            if malformed:
                break
            if strings:
                turn_steps.append(strings)
        if malformed:
            break
        decoded.append(turn_steps)

    verdicts: list[bool] = []
    failure: Score | None = None
    entry = checker_entry(case)
    name = checkers.run_name()
    try:
        for through in range(1, len(decoded) + 1):
            result = checkers.multi_turn_check(
                decoded=decoded[:through],
                ground_truth=copy.deepcopy(case.ground_truth[:through]),
                entry=entry,
                category=case.category,
                name=f"{name}_through{through}",
            )
            if not result.get("valid"):
                failure = Score(
                    False,
                    f"turn {through - 1}: {_text(result.get('error_message', ''))}",
                    str(result.get("error_type", "")),
                )
                break
            verdicts.append(True)
    except Exception as error:  # an assertion or error inside the checker: this case fails, the run goes on
        failure = Score(
            False, f"turn {len(verdicts)}: checker error: {type(error).__name__}: {error}", "checker_error"
        )
    finally:
        checkers.forget(name)

    if failure is None and malformed is not None:
        turn, problem = malformed
        failure = Score(False, f"turn {turn}: {problem.reason}", problem.kind)
    if failure is None and len(verdicts) < total:
        failure = Score(False, f"turn {len(verdicts)} was not finished", "multi_turn:force_terminated")
    padded = tuple(verdicts) + (False,) * (total - len(verdicts))
    if failure is None:
        return Score(True, "ok", turns=padded)
    return Score(False, failure.reason[:REASON_LIMIT], failure.error_type, turns=padded)
