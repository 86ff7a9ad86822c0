"""ATDP JSON Lines: streaming write, and a read that keeps good lines and reports bad ones by number."""

import io
import json

import pytest

from tests.workers.atdp.fixtures import make_trajectory
from workers.atdp import ImportLine, read_jsonl, write_jsonl


def written(records) -> bytes:
    out = io.BytesIO()
    assert write_jsonl(records, out) == len(records)
    return out.getvalue()


def test_one_compact_utf8_line_per_trajectory():
    records = [make_trajectory(), make_trajectory(session_id="sess-é-日本")]
    data = written(records)
    lines = data.split(b"\n")
    assert lines[-1] == b""
    assert len(lines) == 3
    for line, record in zip(lines, records, strict=False):
        assert line == json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    assert "sess-é-日本".encode() in lines[1]


def test_write_streams_from_a_generator():
    produced = []

    def records():
        for position in range(3):
            produced.append(position)
            yield make_trajectory(session_id=f"s{position}")

    out = io.BytesIO()
    assert write_jsonl(records(), out) == 3
    assert produced == [0, 1, 2]
    assert [line.record["session_id"] for line in read_jsonl(out.getvalue().splitlines())] == [
        "s0",
        "s1",
        "s2",
    ]


def test_unicode_line_separators_are_escaped():
    record = make_trajectory(session_id="a\u2028b\u2029c\u0085d")
    data = written([record])
    assert data.count(b"\n") == 1
    assert "\u2028".encode() not in data
    assert b"\\u2028" in data
    # str.splitlines() would break a raw U+2028; the escaped line reads back whole
    (line,) = read_jsonl(data.decode("utf-8").splitlines())
    assert line.record == record


def test_write_refuses_nan():
    record = make_trajectory()
    record["rewards"][0]["value"] = float("nan")
    with pytest.raises(ValueError, match="record 0"):
        written([record])


def test_round_trip():
    records = [make_trajectory(), make_trajectory(status="open", ended_at=None)]
    lines = list(read_jsonl(io.BytesIO(written(records))))
    assert [line.record for line in lines] == records
    assert all(line.ok and line.problems == [] for line in lines)


def test_mixed_file_keeps_good_lines_and_numbers_the_bad():
    good_first, good_last = make_trajectory(session_id="first"), make_trajectory(session_id="last")
    bad_schema = make_trajectory()
    bad_schema["steps"][2]["kind"] = "thinking"
    del bad_schema["governance"]
    truncated = json.dumps(make_trajectory())[:40]
    source = [
        json.dumps(good_first).encode(),  # 1
        b"",  # 2 blank
        truncated.encode(),  # 3
        b"   \r\n",  # 4 blank
        json.dumps(bad_schema).encode() + b"\r\n",  # 5
        b'{"atdp_version": "1.0", "x": NaN}',  # 6
        b"\xff\xfe{}",  # 7
        b"[1, 2]",  # 8
        json.dumps(good_last).encode() + b"\n",  # 9
    ]
    results = list(read_jsonl(source))
    assert [result.line_number for result in results] == [1, 3, 5, 6, 7, 8, 9]
    by_line = {result.line_number: result for result in results}

    assert by_line[1] == ImportLine(1, good_first, [])
    assert by_line[9].record == good_last

    assert by_line[3].record is None
    (problem,) = by_line[3].problems
    assert problem.path == ""
    assert problem.message.startswith("invalid JSON: ")
    assert problem.message.endswith("at column 41")

    assert by_line[5].record is None
    assert {(problem.path, problem.message.split(";")[0]) for problem in by_line[5].problems} == {
        (
            "steps[2].kind",
            "must be one of llm_call, tool_call, tool_result, user_message, user_feedback, env_event",
        ),
        ("governance", "is required"),
    }

    assert [problem.message for problem in by_line[6].problems] == ["invalid JSON: NaN is not a JSON number"]
    assert [problem.message for problem in by_line[7].problems] == ["invalid UTF-8 at byte 1"]
    assert [(problem.path, problem.message) for problem in by_line[8].problems] == [
        ("", "must be object, not array")
    ]


def test_reads_str_lines_and_skips_a_byte_order_mark():
    record = make_trajectory()
    lines = ["\ufeff" + json.dumps(record), "", json.dumps(record)]
    results = list(read_jsonl(lines))
    assert [(result.line_number, result.ok) for result in results] == [(1, True), (3, True)]


def test_deeply_nested_json_is_a_problem_not_a_crash():
    (result,) = read_jsonl([b"[" * 100_000 + b"]" * 100_000])
    assert result.record is None
    assert result.problems[0].message.startswith("invalid JSON")
