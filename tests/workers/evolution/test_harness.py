"""The harness transformation on both wires: system prompt, exemplars, tool routing, and the answer."""

from workers.evolution.harness import (
    HarnessSpec,
    apply_to_request,
    rewrite_chunk,
    rewrite_message,
    rewrite_response,
    tool_versions,
    validate_harness,
)


def chat_tool(name: str, description: str = "") -> dict:
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": {"type": "object"}},
    }


def anthropic_tool(name: str) -> dict:
    return {"name": name, "description": "", "input_schema": {"type": "object"}}


ROUTED = HarnessSpec(
    label="h2",
    system_prompt="Use metric units.",
    exemplars=([{"role": "user", "content": "Weather in Oslo?"}, {"role": "assistant", "content": "4 °C."}],),
    tool_routing={
        "get_weather": {"action": "route", "to": "get_weather_v2", "version": "2"},
        "get_time": {"action": "disable"},
    },
    tool_versions={"search": "7"},
)


def test_system_prompt_merges_with_the_agents_and_exemplars_follow_it():
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "You are a helper."},
            {"role": "user", "content": "Hi"},
        ],
    }
    out = apply_to_request(body, ROUTED)
    assert out["messages"] == [
        {"role": "system", "content": "Use metric units.\n\nYou are a helper."},
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "4 °C."},
        {"role": "user", "content": "Hi"},
    ]
    assert body["messages"][0]["content"] == "You are a helper."  # the agent's body is left alone


def test_a_system_message_is_added_when_the_agent_has_none():
    out = apply_to_request({"messages": [{"role": "user", "content": "Hi"}]}, HarnessSpec("h1", "Be brief."))
    assert out["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]


def test_disabled_tools_are_removed_and_routed_targets_hidden_behind_the_original_name():
    tools = [chat_tool("get_weather", "old"), chat_tool("get_weather_v2", "new"), chat_tool("get_time")]
    out = apply_to_request({"messages": [], "tools": tools, "tool_choice": "auto"}, ROUTED)
    assert out["tools"] == [chat_tool("get_weather", "old")]
    # only the new version offered: the model sees its schema under the old name
    only_new = apply_to_request({"messages": [], "tools": [chat_tool("get_weather_v2", "new")]}, ROUTED)
    assert only_new["tools"] == [chat_tool("get_weather", "new")]


def test_no_tools_left_drops_tools_and_tool_choice():
    out = apply_to_request(
        {
            "messages": [],
            "tools": [chat_tool("get_time")],
            "tool_choice": {"type": "function", "function": {"name": "get_time"}},
        },
        ROUTED,
    )
    assert "tools" not in out
    assert "tool_choice" not in out


def test_forced_tool_choice_of_a_target_is_named_as_the_model_knows_it():
    out = apply_to_request(
        {
            "messages": [],
            "tools": [chat_tool("get_weather_v2")],
            "tool_choice": {"type": "function", "function": {"name": "get_weather_v2"}},
        },
        ROUTED,
    )
    assert out["tool_choice"]["function"]["name"] == "get_weather"


def test_history_calls_to_the_target_are_shown_to_the_model_by_the_original_name():
    history = [
        {"role": "user", "content": "Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather_v2", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "get_weather_v2", "content": "18"},
    ]
    out = apply_to_request({"messages": history}, HarnessSpec("h1", tool_routing=ROUTED.tool_routing))
    assert out["messages"][1]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert out["messages"][2]["name"] == "get_weather"
    assert history[1]["tool_calls"][0]["function"]["name"] == "get_weather_v2"


def test_a_routed_call_in_the_answer_reaches_the_agent_renamed():
    payload = {
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "c",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": "{}"},
                        }
                    ],
                },
            }
        ]
    }
    out = rewrite_response(payload, ROUTED)
    assert out["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather_v2"
    assert payload["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    message = rewrite_message(payload["choices"][0]["message"], ROUTED)
    assert message["tool_calls"][0]["function"]["name"] == "get_weather_v2"


def test_stream_chunks_are_renamed_without_changing_the_chunk_given():
    chunk = {
        "choices": [
            {
                "index": 0,
                "delta": {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "get_weather"}}]},
            }
        ]
    }
    out = rewrite_chunk(chunk, ROUTED)
    assert out["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "get_weather_v2"
    assert chunk["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "get_weather"
    text = {"choices": [{"index": 0, "delta": {"content": "hi"}}]}
    assert rewrite_chunk(text, ROUTED) is text


def test_anthropic_bodies_answers_and_events():
    body = {
        "model": "m",
        "system": "You are a helper.",
        "messages": [
            {"role": "user", "content": "Paris?"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "name": "get_weather_v2", "input": {}}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "18"}]},
        ],
        "tools": [anthropic_tool("get_weather_v2"), anthropic_tool("get_time")],
        "tool_choice": {"type": "tool", "name": "get_weather_v2"},
    }
    out = apply_to_request(body, ROUTED)
    assert out["system"].startswith("Use metric units.\n\nWorked examples")
    assert "user: Weather in Oslo?" in out["system"]
    assert out["system"].endswith("You are a helper.")
    assert out["messages"][1]["content"][0]["name"] == "get_weather"
    assert out["tools"] == [anthropic_tool("get_weather")]
    assert out["tool_choice"] == {"type": "tool", "name": "get_weather"}
    answer = {
        "type": "message",
        "content": [{"type": "tool_use", "id": "u", "name": "get_weather", "input": {}}],
    }
    assert rewrite_response(answer, ROUTED)["content"][0]["name"] == "get_weather_v2"
    event = {"type": "content_block_start", "content_block": {"type": "tool_use", "name": "get_weather"}}
    assert rewrite_chunk(event, ROUTED)["content_block"]["name"] == "get_weather_v2"


def test_tool_versions_are_keyed_by_the_names_the_model_sees():
    tools = [chat_tool("get_weather_v2"), chat_tool("get_time"), chat_tool("search"), chat_tool("other")]
    assert tool_versions(ROUTED, tools) == {"get_weather": "2", "search": "7"}
    assert tool_versions(ROUTED, None) == {}
    assert tool_versions(None, tools) == {}


def test_no_harness_leaves_the_body_as_it_is():
    body = {"messages": [{"role": "user", "content": "x"}], "tools": [chat_tool("get_time")]}
    assert apply_to_request(body, None) is body
    assert apply_to_request(body, HarnessSpec("h1")) is body
    assert rewrite_response({"choices": []}, HarnessSpec("h1")) == {"choices": []}


def test_validation_names_each_problem():
    assert validate_harness(system_prompt="ok", exemplars=[], tool_routing={}, tool_versions={}) == {}
    errors = validate_harness(
        system_prompt="x" * 9000,
        exemplars=[[{"role": "system", "content": "no"}], "not a list", *([[{"role": "user"}]] * 8)],
        tool_routing={
            "a": {"action": "route", "to": "b"},
            "b": {"action": "disable"},
            "c": {"action": "route"},
            "d": {"action": "explode"},
            "bad name": {"action": "disable"},
        },
        tool_versions={"x": 3},
    )
    assert set(errors) == {"system_prompt", "exemplars", "tool_routing", "tool_versions"}
    joined = " ".join(errors["tool_routing"])
    assert "routed or disabled itself" in joined
    assert "c: a route needs `to`" in joined
    assert "d: the action must be disable or route" in joined
    assert "'bad name' is not a tool name" in joined
    assert any("at most 8 exemplars" in problem for problem in errors["exemplars"])
    assert any("exemplar 0: each message needs a role" in problem for problem in errors["exemplars"])
    assert any("exemplar 1 must be a non-empty list" in problem for problem in errors["exemplars"])


def test_two_tools_routed_to_one_target_are_refused():
    errors = validate_harness(
        system_prompt="",
        exemplars=[{"situation": "s", "messages": [{"role": "user", "content": "x"}]}],
        tool_routing={"a": {"action": "route", "to": "z"}, "b": {"action": "route", "to": "z"}},
        tool_versions={},
    )
    assert errors == {"tool_routing": ["two tools are routed to z"]}


def test_a_route_applies_only_to_requests_that_offer_its_target():
    only_old = ROUTED.for_request([chat_tool("get_weather"), chat_tool("get_time")])
    assert dict(only_old.tool_routing) == {"get_time": {"action": "disable"}}
    answer = {
        "choices": [
            {"message": {"tool_calls": [{"id": "c", "function": {"name": "get_weather", "arguments": "{}"}}]}}
        ]
    }
    assert rewrite_response(answer, only_old) == answer  # the agent has no get_weather_v2 to run
    assert tool_versions(only_old, [chat_tool("get_weather")]) == {}
    both = [chat_tool("get_weather"), chat_tool("get_weather_v2")]
    assert ROUTED.for_request(both) is ROUTED
    assert ROUTED.for_request(None) is ROUTED  # no tools: the history is still shown by the known names
