"""The BFCL environment (workers/envs/bfcl): cases and ground truth from the installed bfcl-eval package, the
fixed split, the requests' tools, and scoring by BFCL's own checkers, the multi-turn cases executed turn by
turn against its simulated APIs. No network: a scripted client stands in for the model."""

import ast
import itertools
import json
import sys
from types import SimpleNamespace

import jsonschema
import pytest

from workers.envs import bfcl
from workers.envs.bfcl import (
    CATEGORIES,
    Case,
    LocalExecutor,
    ToolCall,
    checkers,
    load_cases,
    openai_tools,
    reward_bodies,
    run_case,
    score,
    score_run,
    split_of,
    tool_name,
)

# The package's case counts, and the split's sizes (workers/envs/bfcl/README.md states them).
SIZES = {
    "simple_python": (400, 299, 101),
    "multiple": (200, 145, 55),
    "parallel": (200, 150, 50),
    "parallel_multiple": (200, 144, 56),
    "irrelevance": (240, 179, 61),
    "multi_turn_base": (200, 160, 40),
}
BFCL_ONLY_TYPES = {"dict", "float", "tuple", "any"}


def _example(options: list):
    """One allowed value of a BFCL possible-answer list ("" marks an optional parameter)."""
    for option in options:
        if option != "":
            return _concrete(option)
    return None


def _concrete(value):
    # A dict value in BFCL's ground truth maps each key to its allowed values, in lists of dicts too.
    if isinstance(value, dict):
        return {key: _example(options) for key, options in value.items() if _example(options) is not None}
    if isinstance(value, list):
        return [_concrete(item) for item in value]
    return value


def single_turn_answer(case: Case) -> list[ToolCall]:
    """The ground truth as the model's calls: the first allowed value of each parameter, an optional one
    left out where the function's document does not have it (a few possible answers name such a one)."""
    documents = {function["name"]: function for function in case.functions}
    calls = []
    for expected in case.ground_truth:
        ((name, parameters),) = expected.items()
        known = documents[name]["parameters"]["properties"]
        arguments = {
            key: _example(options)
            for key, options in parameters.items()
            if _example(options) is not None and (key in known or "" not in options)
        }
        calls.append(ToolCall(tool_name(name), json.dumps(arguments)))
    return calls


def ground_truth_call(case: Case, text: str) -> ToolCall:
    """A ground-truth call string (`mv(source='a', destination='b')`, `sort('f')`) as the tool call a model
    would make: positional arguments take the names of the function document's parameters, in order."""
    documents = {function["name"]: function for function in case.functions}
    node = ast.parse(text, mode="eval").body
    assert isinstance(node, ast.Call)
    assert isinstance(node.func, ast.Name)
    order = list(documents[node.func.id]["parameters"]["properties"])
    arguments = {order[index]: ast.literal_eval(value) for index, value in enumerate(node.args)}
    arguments.update({keyword.arg: ast.literal_eval(keyword.value) for keyword in node.keywords})
    return ToolCall(node.func.id, json.dumps(arguments))


def multi_turn_answer(case: Case) -> list[list[list[ToolCall]]]:
    """Each turn's ground truth as one step of calls (the text answer that closes a turn drops out)."""
    return [[[ground_truth_call(case, text) for text in turn]] for turn in case.ground_truth]


class ScriptedClient:
    """Stands in for `openai.OpenAI`: `script(messages)` gives the next reply's (content, [ToolCall]).
    Records each request's keyword arguments."""

    def __init__(self, script):
        self.script = script
        self.requests: list[dict] = []
        self._ids = itertools.count()
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self._create))

    def _create(self, **request):
        self.requests.append({**request, "messages": [dict(message) for message in request["messages"]]})
        content, calls = self.script(request["messages"])
        number = next(self._ids)
        tool_calls = [
            SimpleNamespace(
                id=f"call-{number}-{index}",
                type="function",
                function=SimpleNamespace(name=call.name, arguments=call.arguments),
            )
            for index, call in enumerate(calls)
        ]
        message = SimpleNamespace(content=content, tool_calls=tool_calls or None)
        return SimpleNamespace(id=f"completion-{number}", choices=[SimpleNamespace(message=message)])


def ground_truth_script(case: Case, *, wrong_turn: int | None = None, wrong_call: ToolCall | None = None):
    """A model that makes each turn's ground-truth calls in one reply, then answers in words; on
    `wrong_turn` it makes `wrong_call` instead."""

    def script(messages):
        turn = sum(message["role"] == "user" for message in messages) - 1
        if messages[-1]["role"] == "tool":
            return "done", []
        if turn == wrong_turn:
            return "", [wrong_call]
        return "", [ground_truth_call(case, text) for text in case.ground_truth[turn]]

    return script


def _case(case_id: str) -> Case:
    category = case_id.rsplit("_", 1)[0]
    return next(case for case in load_cases(category) if case.case_id == case_id)


def _sample(category: str, every: int) -> list[Case]:
    return load_cases(category)[::every]


# --- loading ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("category", CATEGORIES)
def test_each_category_loads_its_cases_and_ground_truth_from_the_package(category):
    cases = load_cases(category)
    assert len(cases) == SIZES[category][0]
    assert len({case.case_id for case in cases}) == len(cases)
    for case in cases:
        assert case.category == category
        assert case.case_id.rsplit("_", 1)[0] == category
        assert case.turns
        assert all(message["role"] == "user" for turn in case.turns for message in turn)
        assert case.functions
        assert all(function["name"] for function in case.functions)
        if category == "irrelevance":
            assert case.ground_truth is None
        elif case.multi_turn:
            assert len(case.ground_truth) == len(case.turns)
            assert case.involved_classes
            assert case.initial_config is not None
            # the documents of the involved classes, as BFCL's loader assembles them
            assert {function["name"] for function in case.functions} >= {
                ast.parse(text, mode="eval").body.func.id for turn in case.ground_truth for text in turn
            }
        else:
            assert len(case.turns) == 1
            names = {function["name"] for function in case.functions}
            assert all(next(iter(expected)) in names for expected in case.ground_truth)


def test_the_first_simple_case_is_the_packages():
    case = load_cases("simple_python")[0]
    assert case.case_id == "simple_python_0"
    assert case.turns[0][0]["content"].startswith("Find the area of a triangle")
    assert case.ground_truth == [
        {"calculate_triangle_area": {"base": [10], "height": [5], "unit": ["units", ""]}}
    ]


@pytest.mark.parametrize("category", ["live_simple", "live_multiple", "simple_java", "nonsense"])
def test_other_categories_are_refused(category):
    with pytest.raises(ValueError, match="unknown BFCL category"):
        load_cases(category)


def test_a_live_category_is_refused_as_reserved():
    with pytest.raises(ValueError, match="reserved"):
        load_cases("live_parallel")


# --- the split -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("category", CATEGORIES)
def test_the_split_is_disjoint_covers_the_category_and_has_the_stated_sizes(category):
    everything = {case.case_id for case in load_cases(category)}
    train = {case.case_id for case in load_cases(category, split="train")}
    heldout = {case.case_id for case in load_cases(category, split="heldout")}
    assert not train & heldout
    assert train | heldout == everything
    assert (len(everything), len(train), len(heldout)) == SIZES[category]


def test_the_split_is_a_fixed_function_of_the_case_id():
    # Pinned: a change of seed or hash would move cases between training and evaluation.
    assert [split_of(f"multi_turn_base_{number}") for number in range(6)] == ["train"] * 5 + ["heldout"]
    heldout = [case.case_id for case in load_cases("multi_turn_base", split="heldout")]
    assert sorted(heldout)[:5] == [
        "multi_turn_base_101",
        "multi_turn_base_106",
        "multi_turn_base_108",
        "multi_turn_base_127",
        "multi_turn_base_137",
    ]
    assert all(case.split == split_of(case.case_id) for case in load_cases("parallel"))
    with pytest.raises(ValueError, match="split"):
        load_cases("multiple", split="test")


# --- requests --------------------------------------------------------------------------------------------


def _schemas(schema: dict):
    yield schema
    for inner in (schema.get("properties") or {}).values():
        yield from _schemas(inner)
    if isinstance(schema.get("items"), dict):
        yield from _schemas(schema["items"])


@pytest.mark.parametrize("category", CATEGORIES)
def test_every_case_becomes_openai_tools_in_json_schema(category):
    checked = set()  # multi-turn cases share their classes' documents: each distinct tool is checked once
    for case in load_cases(category):
        tools = openai_tools(case)
        assert len(tools) == len(case.functions)
        names = [tool["function"]["name"] for tool in tools]
        assert len(set(names)) == len(names)
        for tool in tools:
            if (text := json.dumps(tool, sort_keys=True)) in checked:
                continue
            checked.add(text)
            assert tool["type"] == "function"
            assert all(character.isalnum() or character in "_-" for character in tool["function"]["name"])
            parameters = tool["function"]["parameters"]
            assert parameters["type"] == "object"
            jsonschema.Draft202012Validator.check_schema(parameters)
            for schema in _schemas(parameters):
                assert schema["type"] not in BFCL_ONLY_TYPES
                assert "optional" not in schema
                assert "response" not in schema


def test_bfcl_types_map_to_json_schema():
    function = {
        "name": "geo.distance",
        "description": "d",
        "parameters": {
            "type": "dict",
            "properties": {
                "origin": {"type": "tuple", "items": {"type": "float"}, "description": "a pair"},
                "options": {"type": "dict", "properties": {"unit": {"type": "string"}}, "optional": True},
                "anything": {"type": "any"},
                "count": {"type": "integer", "default": 1},
                "untyped": {"description": "no type"},
            },
            "required": ["origin"],
        },
    }
    tool = bfcl.openai_tool(function)
    assert tool["function"]["name"] == "geo_distance"
    properties = tool["function"]["parameters"]["properties"]
    assert tool["function"]["parameters"]["type"] == "object"
    assert properties["origin"] == {"type": "array", "items": {"type": "number"}, "description": "a pair"}
    assert properties["options"] == {"type": "object", "properties": {"unit": {"type": "string"}}}
    assert properties["anything"] == {"type": "string"}
    assert properties["count"] == {"type": "integer", "default": 1}
    assert properties["untyped"]["type"] == "string"
    assert function["parameters"]["type"] == "dict"  # the case's document is left as loaded


# --- scoring: BFCL's checker agrees on the ground truth ---------------------------------------------------


@pytest.mark.parametrize("category", ["simple_python", "multiple", "parallel", "parallel_multiple"])
def test_ground_truth_scores_right_in_each_single_turn_category(category):
    cases = load_cases(category)
    for case in cases:
        verdict = score(case, single_turn_answer(case))
        assert verdict.valid, (case.case_id, verdict.reason)
        assert verdict.value == 1.0


def test_irrelevance_is_won_by_calling_nothing_and_lost_by_any_call():
    for case in _sample("irrelevance", every=6):
        assert score(case, []).valid
        function = case.functions[0]
        wrong = score(case, [ToolCall(tool_name(function["name"]), "{}")])
        assert not wrong.valid
        assert wrong.error_type == "irrelevance_error:called"
        malformed = score(case, [ToolCall("no_such_function", "{not json")])
        assert not malformed.valid


def test_multi_turn_ground_truth_scores_right_through_every_turn():
    for case in load_cases("multi_turn_base"):
        verdict = score(case, multi_turn_answer(case))
        assert verdict.valid, (case.case_id, verdict.reason)
        assert verdict.turns == (True,) * len(case.turns)


def test_multi_turn_ground_truth_executed_turn_by_turn_by_the_agent_scores_right():
    for case in _sample("multi_turn_base", every=10):
        client = ScriptedClient(ground_truth_script(case))
        run = run_case(client, model="m", case=case, session_id="s-1")
        assert run.error is None
        assert run.finished_turns == len(case.turns)
        # each turn: the calls, then the answer in words after their results came back (a turn whose
        # ground truth calls nothing is one answer)
        assert len(run.steps) == sum(2 if calls else 1 for calls in case.ground_truth)
        results = [message for message in run.transcript if message["role"] == "tool"]
        assert len(results) == sum(len(turn) for turn in case.ground_truth)
        assert not any(message["content"].startswith("Error") for message in results), case.case_id
        verdict = score_run(run)
        assert verdict.valid, (case.case_id, verdict.reason)
        # one conversation: every request repeats the one before it and carries the same session
        for earlier, later in itertools.pairwise(client.requests):
            assert later["messages"][: len(earlier["messages"])] == earlier["messages"]
        assert {request["extra_headers"]["X-Session-Id"] for request in client.requests} == {"s-1"}
        assert {request["extra_headers"]["X-Task-Id"] for request in client.requests} == {case.case_id}


def test_the_executor_answers_with_the_simulated_apis_results():
    case = _case("multi_turn_base_0")
    with LocalExecutor(case) as executor:
        assert executor.execute([ToolCall("cd", '{"folder": "document"}')]) == [
            '{"current_working_directory": "document"}'
        ]
        listed = executor.execute([ToolCall("ls", "")])
        assert "final_report.pdf" in listed[0]
        assert executor.execute([ToolCall("cd", '{"folder": "nowhere"}')])[0].startswith('{"error"')


# --- scoring: wrong calls are rejected -------------------------------------------------------------------


def test_a_wrong_argument_is_rejected_by_the_ast_checker():
    case = _case("simple_python_0")
    verdict = score(case, [ToolCall("calculate_triangle_area", '{"base": 11, "height": 5}')])
    assert not verdict.valid
    assert verdict.error_type.startswith("value_error")
    assert "base" in verdict.reason


def test_a_wrong_function_and_a_missing_parallel_call_are_rejected():
    case = load_cases("multiple")[0]
    other = next(function for function in case.functions if function["name"] != "triangle_properties.get")
    assert not score(case, [ToolCall(tool_name(other["name"]), '{"radius": 2}')]).valid
    parallel = _case("parallel_0")
    answer = single_turn_answer(parallel)
    assert score(parallel, answer).valid
    missing = score(parallel, answer[:1])
    assert not missing.valid
    assert "wrong_count" in missing.error_type
    assert not score(parallel, []).valid


def test_a_wrong_multi_turn_call_fails_its_turn_and_the_ones_after():
    case = next(case for case in load_cases("multi_turn_base") if len(case.turns) >= 3)
    answer = multi_turn_answer(case)
    answer[1] = [[ToolCall("ls", "{}")]]  # not what the user asked for in turn 1
    verdict = score(case, answer)
    assert not verdict.valid
    assert verdict.turns == (True,) + (False,) * (len(case.turns) - 1)
    assert verdict.reason.startswith("turn 1:")
    assert verdict.error_type.startswith("multi_turn:")


def test_an_unfinished_multi_turn_case_fails():
    case = _case("multi_turn_base_0")
    verdict = score(case, multi_turn_answer(case)[:2])
    assert not verdict.valid
    assert verdict.error_type == "multi_turn:force_terminated"
    assert verdict.turns == (True, True, False, False)


def test_scoring_a_case_again_gives_the_same_verdict_and_keeps_no_api_state():
    case = _case("multi_turn_base_0")
    answer = multi_turn_answer(case)
    wrong = [[[ToolCall("mkdir", '{"dir_name": "other"}')]]] + answer[1:]
    verdicts = [score(case, answer), score(case, wrong), score(case, answer)]
    assert [verdict.valid for verdict in verdicts] == [True, False, True]
    utilities = checkers._modules()["utils"]
    assert not [name for name in vars(utilities) if name.startswith("arealrun")]


def test_the_ast_checker_reads_our_stand_in_for_bfcls_model_table():
    score(_case("simple_python_1"), [ToolCall("math_factorial", '{"number": 5}')])
    table = sys.modules["bfcl_eval.constants.model_config"]
    assert table.MODEL_CONFIG_MAPPING[checkers.MODEL_NAME].underscore_to_dot is True
    assert "Stand-in" in (table.__doc__ or "")
    # the dotted name is compared in its underscored form, as our tools send it
    assert score(_case("simple_python_1"), [ToolCall("math_factorial", '{"number": 5}')]).valid
    assert not score(_case("simple_python_1"), [ToolCall("math.factorial", '{"number": 5}')]).valid


# --- malformed calls: failed cases with a reason, never an exception --------------------------------------

SIMPLE_MALFORMED = [
    (ToolCall("calculate_triangle_area", "{base: 10"), "malformed_arguments", "not JSON"),
    (ToolCall("calculate_triangle_area", "[10, 5]"), "malformed_arguments", "not an object"),
    (ToolCall("calculate_triangle_area", '"10"'), "malformed_arguments", "not an object"),
    (ToolCall("calculate_triangle_area", '{"base": NaN, "height": 5}'), "malformed_arguments", "not JSON"),
    (ToolCall("calculate_triangle_area", '{"base": 1e999, "height": 5}'), "malformed_arguments", "finite"),
    (ToolCall("area_of_triangle", '{"base": 10, "height": 5}'), "unknown_function", "unknown function"),
    (ToolCall("", "{}"), "unknown_function", "unknown function"),
]


@pytest.mark.parametrize(("call", "kind", "words"), SIMPLE_MALFORMED)
def test_a_malformed_single_turn_call_is_a_failed_case_with_its_reason(call, kind, words):
    verdict = score(_case("simple_python_0"), [call])
    assert not verdict.valid
    assert verdict.error_type == kind
    assert words in verdict.reason


def test_odd_values_the_checker_does_not_expect_are_failed_cases():
    case = _case("simple_python_0")
    for arguments in ['{"base": {"x": 1}, "height": 5}', '{"base": [[[]]], "height": null}', '{"unit": 3}']:
        verdict = score(case, [ToolCall("calculate_triangle_area", arguments)])
        assert not verdict.valid
        assert verdict.reason


MULTI_TURN_MALFORMED = [
    (ToolCall("cd", "{folder"), "malformed_arguments"),
    (ToolCall("cd", '{"1folder": "document"}'), "malformed_arguments"),
    (ToolCall("cd", '{"class": "document"}'), "malformed_arguments"),
    (ToolCall("__import__", '{"name": "os"}'), "unknown_function"),
    (ToolCall("rm_rf", "{}"), "unknown_function"),
]


@pytest.mark.parametrize(("call", "kind"), MULTI_TURN_MALFORMED)
def test_a_malformed_multi_turn_call_fails_the_case_and_the_run_goes_on(call, kind):
    case = _case("multi_turn_base_0")
    client = ScriptedClient(ground_truth_script(case, wrong_turn=1, wrong_call=call))
    run = run_case(client, model="m", case=case, session_id="s-2")
    assert run.error is None
    assert run.finished_turns == len(case.turns)
    refused = [message for message in run.transcript if message["role"] == "tool"][3]  # turn 1's answer
    assert refused["content"].startswith("Error: ")
    verdict = score_run(run)
    assert not verdict.valid
    assert verdict.error_type == kind
    assert verdict.turns == (True, False, False, False)
    assert verdict.reason.startswith("turn 1: ")


def test_the_executor_answers_a_malformed_call_with_its_reason_and_runs_the_rest():
    with LocalExecutor(_case("multi_turn_base_0")) as executor:
        results = executor.execute([ToolCall("cd", "nope"), ToolCall("pwd", "")])
    assert results[0].startswith("Error: arguments of 'cd' are not JSON")
    assert "workspace" in results[1]


def test_a_single_turn_case_has_no_executor():
    with pytest.raises(ValueError, match="single-turn"):
        LocalExecutor(_case("parallel_0"))


# --- the agent's loop and its rewards (no network) -------------------------------------------------------


def test_a_single_turn_run_is_one_request_and_one_trajectory_reward():
    case = _case("simple_python_0")
    client = ScriptedClient(lambda messages: ("", single_turn_answer(case)))
    run = run_case(client, model="m", case=case, session_id="s-3", max_tokens=64)
    assert len(client.requests) == 1
    assert len(run.steps) == 1
    request = client.requests[0]
    assert request["tools"] == openai_tools(case)
    assert request["messages"] == [dict(message) for message in case.turns[0]]
    assert request["max_tokens"] == 64
    verdict = score_run(run)
    assert verdict.valid
    assert reward_bodies(run, verdict) == [
        {
            "kind": "numeric",
            "source": "environment",
            "session_id": "s-3",
            "value": 1.0,
            "idempotency_key": "bfcl:s-3",
            "comment": "BFCL simple_python_0: ok",
        }
    ]


def test_a_multi_turn_run_is_rewarded_per_step_with_its_turns_verdict():
    case = _case("multi_turn_base_0")
    client = ScriptedClient(ground_truth_script(case, wrong_turn=2, wrong_call=ToolCall("pwd", "")))
    run = run_case(client, model="m", case=case, session_id="s-4")
    verdict = score_run(run)
    assert verdict.turns == (True, True, False, False)
    bodies = reward_bodies(run, verdict)
    assert [body["interaction_id"] for body in bodies] == [step.completion_id for step in run.steps]
    assert [body["value"] for body in bodies] == [1.0 if step.turn < 2 else 0.0 for step in run.steps]
    assert {body["source"] for body in bodies} == {"environment"}


def test_the_step_limit_ends_a_turn_unfinished():
    case = _case("multi_turn_base_0")
    client = ScriptedClient(lambda messages: ("", [ToolCall("pwd", "")]))  # never answers in words
    run = run_case(client, model="m", case=case, session_id="s-5", max_steps_per_turn=3)
    assert len(client.requests) == 3
    assert run.finished_turns == 0
    verdict = score_run(run)
    assert not verdict.valid
    assert verdict.error_type == "multi_turn:force_terminated"
    assert [body["value"] for body in reward_bodies(run, verdict)] == [0.0, 0.0, 0.0]


def test_a_transport_error_ends_the_run_unrewarded():
    import httpx
    import openai

    case = _case("irrelevance_0")

    def refuse(messages):
        raise openai.APIConnectionError(request=httpx.Request("POST", "http://127.0.0.1/v1/chat/completions"))

    run = run_case(ScriptedClient(refuse), model="m", case=case, session_id="s-6")
    assert run.error
    assert "APIConnectionError" in run.error
    assert not run.steps
    verdict = score_run(run)
    assert not verdict.valid
    assert verdict.error_type == "agent_error"
    assert reward_bodies(run, verdict) == []


def test_a_reply_without_choices_is_an_error_not_a_crash():
    case = _case("simple_python_0")
    client = ScriptedClient(lambda messages: ("", []))
    client.chat.completions.create = lambda **request: SimpleNamespace(id="c", choices=[])
    run = run_case(client, model="m", case=case, session_id="s-7")
    assert run.error == "the reply had no choices"
    assert json.dumps(score_run(run).reason)
