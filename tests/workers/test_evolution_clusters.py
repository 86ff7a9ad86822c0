import json
from datetime import UTC, datetime, timedelta

from workers.evolution.clusters import (
    FAILED_RESULT,
    MALFORMED_CALL,
    ToolEvent,
    argument_shape,
    argument_strings,
    cluster,
    event_key,
    failure_signature,
    is_malformed,
    merge_examples,
)

START = datetime(2026, 1, 1, tzinfo=UTC)


def test_failure_signature_of_json_errors_and_error_text():
    assert failure_signature('{"error": "city \'Lima\' not found (404)"}') == "city '<s>' not found (<n>)"
    assert failure_signature('{"errors": [{"message": "bad day 12"}]}') == "bad day <n>"
    assert failure_signature('{"error": {"type": "RateLimited", "retry": 3}}') == "RateLimited"
    assert failure_signature("Error: timeout after 30 s") == "Error: timeout after <n> s"
    assert failure_signature('failed to reach "api.example"') == "failed to reach '<s>'"
    trace = 'Traceback (most recent call last):\n  File "x.py", line 3\nKeyError: "lima"\n'
    assert failure_signature(trace) == "KeyError: '<s>'"
    assert len(failure_signature("error " + "x" * 500)) == 200


def test_the_calls_own_arguments_are_particulars_of_the_signature():
    # The tool_failure scenario: one station offline per city is one problem, not one cluster per city.
    offline = [
        ToolEvent(f"t{index}", "get_weather", json.dumps({"city": city}), json.dumps({"error": error}), START)
        for index, (city, error) in enumerate(
            [
                ("Oslo", "station Oslo offline"),
                ("Lima", "station lima offline"),
                ("Cairo", "station Cairo offline"),
            ]
        )
    ]
    (found,) = cluster(offline)
    assert (found.signature, found.count) == ("station <s> offline", 3)
    assert failure_signature("Error: Oslo down", ["Oslo"]) == "Error: <s> down"
    assert failure_signature("Error: Osloville down", ["Oslo"]) == "Error: Osloville down"  # whole words only
    assert argument_strings('{"city": "Oslo", "tags": ["a", "new york"], "n": 3}') == ["new york", "Oslo"]
    assert argument_strings("{city: Oslo") == []


def test_results_that_are_not_failures():
    assert failure_signature(None) is None
    assert failure_signature('{"temperature": 21}') is None
    assert failure_signature('{"error": null, "temperature": 21}') is None
    assert failure_signature("Sunny, 21 degrees; no error reported") is None


def test_argument_shape():
    assert argument_shape('{"city": "Paris"}') == "{city:str}"
    assert argument_shape('{"days": 3, "city": "Paris", "metric": true}') == "{city:str,days:num,metric:bool}"
    assert argument_shape('{"city": "x", "extra": {"a": 1}, "tags": []}') == "{city:str,extra:obj,tags:list}"
    assert argument_shape("{city: Paris") == "<invalid json>"
    assert argument_shape('["Paris"]') == "list"
    assert argument_shape("") == "{}"
    assert is_malformed("{city: Paris")
    assert is_malformed('"Paris"')
    assert not is_malformed('{"city": "x"}')


def _event(index, city, result, *, tool="weather", malformed=False, arguments=None):
    return ToolEvent(
        trajectory_id=f"t{index}",
        tool=tool,
        arguments=arguments or f'{{"city": "{city}"}}',
        result_text=result,
        at=START + timedelta(seconds=index),
        malformed=malformed,
    )


def test_cluster_groups_by_tool_kind_signature_and_shape():
    events = [
        _event(index, f"city{index}", f'{{"error": "unknown city \'city{index}\'"}}') for index in range(12)
    ]
    events += [_event(20 + index, "paris", '{"temperature": 20}') for index in range(5)]
    events += [_event(40, "x", None, malformed=True, arguments="{city: x")]
    events += [_event(41, "x", "Error: quota exceeded", tool="search", arguments='{"q": "x"}')]
    found = cluster(events)
    assert [(item.tool, item.kind, item.count) for item in found] == [
        ("weather", FAILED_RESULT, 12),
        ("search", FAILED_RESULT, 1),
        ("weather", MALFORMED_CALL, 1),
    ]
    top = found[0]
    assert top.signature == "unknown city '<s>'"
    assert top.argument_shape == "{city:str}"
    assert top.first_seen == START
    assert top.last_seen == START + timedelta(seconds=11)
    assert top.examples == [f"t{index}" for index in range(2, 12)]  # the newest ten, newest last
    assert top.example_arguments == [f'{{"city": "city{index}"}}' for index in range(7, 12)]
    assert found[2].argument_shape == "<invalid json>"


def test_event_key_is_none_for_a_success_and_examples_merge_newest_last():
    assert event_key(_event(1, "paris", "ok")) is None
    assert event_key(_event(1, "paris", "error: x"))[1] == FAILED_RESULT
    assert merge_examples(["a", "b", "c"], ["b", "d"], 3) == ["c", "b", "d"]
