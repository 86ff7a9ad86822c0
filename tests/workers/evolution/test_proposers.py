"""The proposers: rules (route to another version, or disable and say so; exemplars) and a model's rewrite."""

from workers.evolution.harness import HarnessSpec, validate_harness
from workers.evolution.proposers import ModelProposer, RuleProposer, alternative_version, exemplar_from

CLUSTER = {
    "tool": "get_weather",
    "kind": "failed_result",
    "signature": "KeyError: city",
    "argument_shape": "{location:str}",
    "count": 12,
    "example_arguments": [{"location": "Paris"}],
}
SUCCESS = [
    {"role": "system", "content": "agent prompt"},
    {"role": "user", "content": "Weather in Rome?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "get_weather_v2", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "c", "content": "21"},
    {"role": "assistant", "content": "21 °C in Rome."},
    {"role": "user", "content": "thanks"},
]


def test_the_highest_offered_version_is_the_alternative():
    offered = ["get_weather", "get_weather_v2", "get_weather_v10", "get_weatherly_v3", "x_get_weather_v4"]
    assert alternative_version("get_weather", offered) == ("get_weather_v10", "10")
    assert alternative_version("get_weather", ["get_weather"]) is None


def test_an_offered_alternative_version_is_routed_to_and_nothing_else_changes():
    cluster = {**CLUSTER, "offered_tools": ["get_weather", "get_weather_v2"]}
    current = HarnessSpec("h1", "Be brief.", exemplars=(SUCCESS[1:5],))
    proposal = RuleProposer().propose(cluster, current, [{"messages": SUCCESS}, SUCCESS])
    assert proposal.tool_routing == {
        "get_weather": {"action": "route", "to": "get_weather_v2", "version": "2"}
    }
    assert proposal.system_prompt == "Be brief."
    assert proposal.exemplars == (SUCCESS[1:5],)  # what the model reads stays as it was: no new exemplar
    fields = validate_harness(
        system_prompt=proposal.system_prompt,
        exemplars=list(proposal.exemplars),
        tool_routing=dict(proposal.tool_routing),
        tool_versions={},
    )
    assert fields == {}


def test_without_an_alternative_the_tool_is_disabled_and_the_model_told():
    proposal = RuleProposer().propose({**CLUSTER, "offered_tools": ["get_weather"]}, None, [SUCCESS])
    assert proposal.tool_routing == {"get_weather": {"action": "disable"}}
    assert proposal.system_prompt == (
        "The tool get_weather is unavailable for inputs shaped like {location:str}; do not call it, answer "
        "with what you know instead."
    )
    assert proposal.exemplars == (SUCCESS[1:5],)  # it calls get_weather_v2, not the disabled tool
    calling_disabled = [
        {"role": "user", "content": "Rome?"},
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": "21"},
        {"role": "assistant", "content": "21."},
    ]
    again = RuleProposer().propose(CLUSTER, None, [calling_disabled])
    assert again.exemplars == ()


def test_nothing_new_proposes_nothing():
    current = HarnessSpec("h3", tool_routing={"get_weather": {"action": "disable"}})
    assert RuleProposer().propose(CLUSTER, current, []) is None
    assert RuleProposer().propose({"tool": ""}, None, [SUCCESS]) is None


def test_an_unfinished_conversation_gives_no_exemplar():
    assert exemplar_from(SUCCESS[:4]) is None
    long = [{"role": "user", "content": "x" * 5000}, {"role": "assistant", "content": "ok"}]
    assert len(exemplar_from(long)[0]["content"]) == 1001


def test_the_model_proposer_asks_with_the_cluster_and_parses_the_reply():
    asked = []

    def complete(messages):
        asked.append(messages)
        return "Here it is:\n<system_prompt>\nAlways pass `city`, never `location`.\n</system_prompt>"

    proposal = ModelProposer(complete).propose(CLUSTER, HarnessSpec("h1", "Be brief."), [SUCCESS])
    assert proposal.system_prompt == "Always pass `city`, never `location`."
    assert proposal.tool_routing == {}
    question = asked[0][-1]["content"]
    assert "Be brief." in question
    assert "KeyError: city" in question
    assert "Weather in Rome?" in question


def test_the_model_proposer_refuses_empty_long_unchanged_and_refusing_replies():
    for reply in (
        "",
        "   ",
        "<system_prompt></system_prompt>",
        "x" * 200,
        "I'm sorry, I cannot help.",
        "Be brief.",
    ):
        proposer = ModelProposer(lambda messages, reply=reply: reply, max_chars=100)
        assert proposer.propose(CLUSTER, HarnessSpec("h1", "Be brief."), []) is None, reply
