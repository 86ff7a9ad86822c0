"""The gateway's JSON codec (apps/gateway/wire_json.py): orjson's speed, the standard library's values."""

import datetime
import json
import math

import pytest

from apps.gateway import wire_json


def test_an_answer_round_trips_to_the_same_json_value():
    answer = {
        "id": "chatcmpl-1",
        "choices": [{"message": {"role": "assistant", "content": "Grüße aus 東京"}, "token_ids": [1, 2, 3]}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
        "logprob": -0.125,
        "nothing": None,
    }
    raw = json.dumps(answer).encode()
    encoded = wire_json.dumps(wire_json.loads(raw))
    assert json.loads(encoded) == answer
    assert "東京".encode() in encoded  # UTF-8 as itself, not \u escapes
    assert b", " not in encoded
    assert b'": ' not in encoded


def test_non_finite_logprobs_keep_their_tokens():
    raw = b'{"logprobs":[NaN,-Infinity,Infinity,1e400,-0.5]}'
    value = wire_json.loads(raw)
    assert math.isnan(value["logprobs"][0])
    assert value["logprobs"][1:4] == [-math.inf, math.inf, math.inf]
    assert all(isinstance(item, float) for item in value["logprobs"])
    assert wire_json.dumps(value) == b'{"logprobs":[NaN,-Infinity,Infinity,Infinity,-0.5]}'


def test_a_client_body_read_with_parse_constant_keeps_its_tokens():
    value = json.loads(b'{"x": -Infinity}', parse_constant=wire_json.parse_constant)
    assert value["x"] == -math.inf
    assert wire_json.dumps(value) == b'{"x":-Infinity}'


def test_a_float_that_is_not_finite_and_was_not_read_is_written_as_null():
    assert wire_json.dumps({"x": float("nan")}) == b'{"x":null}'


def test_what_orjson_cannot_encode_goes_through_the_standard_library():
    huge = 2**70
    assert json.loads(wire_json.dumps({"seed": huge})) == {"seed": huge}
    lone = wire_json.loads(b'{"text":"\\ud800 end"}')  # a lone surrogate: orjson refuses it both ways
    assert lone == {"text": "\ud800 end"}
    assert json.loads(wire_json.dumps(lone)) == lone


def test_other_types_are_written_as_str_as_before():
    moment = datetime.datetime(2026, 12, 7, 1, 2, 3, tzinfo=datetime.UTC)
    assert json.loads(wire_json.dumps({"at": moment, 7: "seven"})) == {"at": str(moment), "7": "seven"}


@pytest.mark.parametrize("raw", [b"{bad", b"", b'{"a": 1', b"[1,]"])
def test_what_is_not_json_is_a_value_error(raw):
    with pytest.raises(json.JSONDecodeError):  # a ValueError, as json.loads raises
        wire_json.loads(raw)
