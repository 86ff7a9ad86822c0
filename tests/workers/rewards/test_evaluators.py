import pytest

from workers.rewards.evaluators import EvaluatorError, Outcome, ToolCall, run_evaluator


def test_exact_match():
    outcome = Outcome(task_id="t1", final_text="  The answer is 42 ")
    assert run_evaluator("exact_match", {"expected": "the answer is 42"}, outcome).value == 1.0
    assert (
        run_evaluator("exact_match", {"expected": "the answer is 42", "strict": True}, outcome).value == 0.0
    )
    assert (
        run_evaluator("exact_match", {"expected_by_task": {"t1": "The answer is 41"}}, outcome).value == 0.0
    )
    with pytest.raises(EvaluatorError):
        run_evaluator("exact_match", {}, outcome)


def test_regex():
    outcome = Outcome(final_text="Total: 1,234 USD")
    assert run_evaluator("regex", {"pattern": r"\d[\d,]* usd", "ignore_case": True}, outcome).value == 1.0
    assert run_evaluator("regex", {"pattern": r"\d+", "fullmatch": True}, outcome).value == 0.0
    with pytest.raises(EvaluatorError):
        run_evaluator("regex", {"pattern": "("}, outcome)


def test_json_schema():
    schema = {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}
    assert (
        run_evaluator("json_schema", {"schema": schema}, Outcome(final_text='{"city": "Oslo"}')).value == 1.0
    )
    invalid = run_evaluator("json_schema", {"schema": schema}, Outcome(final_text='{"city": 3}'))
    assert invalid.value == 0.0
    assert "invalid" in invalid.label
    assert run_evaluator("json_schema", {"schema": schema}, Outcome(final_text="Oslo")).label == "not JSON"
    with pytest.raises(EvaluatorError):
        run_evaluator("json_schema", {"schema": {"type": "nonsense"}}, Outcome())


def test_tool_call_succeeded():
    ok = ToolCall("c1", "lookup", True)
    failed = ToolCall("c2", "book", False)
    assert run_evaluator("tool_call_succeeded", {}, Outcome(tool_calls=(ok,))).value == 1.0
    assert run_evaluator("tool_call_succeeded", {}, Outcome(tool_calls=(ok, failed))).value == 0.0
    assert (
        run_evaluator("tool_call_succeeded", {"tool": "lookup"}, Outcome(tool_calls=(ok, failed))).value
        == 1.0
    )
    assert (
        run_evaluator("tool_call_succeeded", {}, Outcome(tool_calls=(ToolCall("c3", "x", None),))).value
        == 0.0
    )
    assert run_evaluator("tool_call_succeeded", {}, Outcome()).label == "no tool call"


def test_program_check(tmp_path):
    script = tmp_path / "check_outcome.py"
    script.write_text(
        "#!/usr/bin/env python3\nimport json, sys\nout = json.load(sys.stdin)\n"
        "sys.exit(0 if out['environment'].get('tests_passed') else 3)\n"
    )
    script.chmod(0o755)
    scored = tmp_path / "score.sh"
    scored.write_text("#!/bin/sh\ncat > /dev/null\necho 0.25\n")
    scored.chmod(0o755)
    passed = Outcome(environment={"tests_passed": True})
    assert run_evaluator_in(tmp_path, {"argv": ["check_outcome.py"]}, passed).value == 1.0
    assert run_evaluator_in(tmp_path, {"argv": ["check_outcome.py"]}, Outcome()).value == 0.0
    assert run_evaluator_in(tmp_path, {"argv": ["score.sh"]}, Outcome()).value == 0.25
    with pytest.raises(EvaluatorError):
        run_evaluator_in(tmp_path, {"argv": ["../../bin/sh"]}, Outcome())
    with pytest.raises(EvaluatorError):
        run_evaluator_in(tmp_path, {"argv": ["missing"]}, Outcome())
    for timeout in (1e9, float("nan"), 0, "soon"):  # a program is stopped after at most 60 s
        with pytest.raises(EvaluatorError, match="timeout_s"):
            run_evaluator_in(tmp_path, {"argv": ["score.sh"], "timeout_s": timeout}, Outcome())


def run_evaluator_in(directory, config, outcome):
    from workers.rewards.evaluators import program_check

    return program_check(outcome, config, programs_dir=str(directory))
