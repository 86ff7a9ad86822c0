"""Message-prefix attribution that survives a framework's habits, and never merges two conversations: a later
call that changes the system prompt (smolagents' final-answer call) or re-sends a reply with other whitespace
continues its run; any other difference in the messages is another conversation (apps/gateway/README.md,
"Session attribution")."""

import openai
import pytest

from apps.trajectories.models import Step, Trajectory
from tests.gateway.conftest import MODEL
from tests.gateway.helpers import drain

pytestmark = pytest.mark.django_db(transaction=True)

SYSTEM = "You are an agent. Solve the task step by step."
FINAL = "An agent tried to answer the task but got stuck. Give the final answer."
TASK = "What is the capital of France?"


def ask(client, messages, **extra):
    reply = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=6, temperature=0, **extra
    )
    return reply.id, reply.choices[0].message.content or ""


def test_a_changed_system_prompt_and_rewrapped_replies_stay_one_run(gateway, backend, agent_key, tenant):
    url, gw = gateway
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=agent_key("inference"), max_retries=0)
    history = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    first, reply = ask(client, history)
    history += [
        {"role": "assistant", "content": f"  {reply}\n"},
        {"role": "user", "content": "Observation: ok"},
    ]
    second, reply_two = ask(client, history)  # the reply re-sent with other whitespace around it
    rewrapped = "\n".join(reply_two.split(" ")) if " " in reply_two else reply_two + "\n\n"
    final_call = [
        {"role": "system", "content": FINAL},  # smolagents' final-answer call: another system prompt
        *history[1:],
        {"role": "assistant", "content": rewrapped},  # and the last reply re-wrapped inside
        {"role": "user", "content": "Based on the above, answer the task."},
    ]
    third, _ = ask(client, final_call)
    drain(gw)
    [trajectory] = Trajectory.objects.filter(tenant=tenant)
    steps = {str(step.pk): step for step in Step.objects.filter(trajectory=trajectory)}
    assert [steps[step_id].index for step_id in (first, second, third)] == [0, 1, 2]
    assert str(steps[second].parent_step_id) == first
    assert str(steps[third].parent_step_id) == second
    assert steps[third].observation["messages"][0] == {"role": "system", "content": FINAL}


def test_conversations_that_differ_in_anything_else_are_never_merged(gateway, backend, agent_key, tenant):
    url, gw = gateway
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=agent_key("inference"), max_retries=0)
    start = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    first, reply = ask(client, start)
    follow = {"role": "user", "content": "Go on."}
    others = [
        # another user message before the same reply (another system prompt too)
        [{"role": "system", "content": FINAL}, {"role": "user", "content": TASK + "!"}],
        # the same task, but a reply the gateway never gave
        [*start[:1], *start[1:]],
    ]
    others[0] += [{"role": "assistant", "content": reply}, follow]
    others[1] += [{"role": "assistant", "content": reply + " and more"}, follow]
    # whitespace inside a word is not whitespace around it: "Par is" is not "Paris"
    split = (
        reply.replace(reply.strip()[:2], reply.strip()[:1] + " " + reply.strip()[1:2], 1)
        if reply.strip()
        else "x"
    )
    others.append([*start, {"role": "assistant", "content": split}, follow])
    ids = [ask(client, messages)[0] for messages in others]
    drain(gw)
    trajectories = {str(Step.objects.get(pk=step_id).trajectory_id) for step_id in [first, *ids]}
    assert len(trajectories) == 1 + len(others)
    assert Trajectory.objects.filter(tenant=tenant).count() == 1 + len(others)
    assert all(Step.objects.get(pk=step_id).index == 0 for step_id in ids)

    # the same continuation, exact, still joins the first conversation
    same, _ = ask(client, [*start, {"role": "assistant", "content": reply}, follow])
    drain(gw)
    assert str(Step.objects.get(pk=same).trajectory_id) == str(Step.objects.get(pk=first).trajectory_id)


def test_tool_call_arguments_compare_loosely_as_the_json_they_spell():
    """Pydantic AI re-sends a call's arguments compact (`{"city":"Paris"}` for the `{"city": "Paris"}` it got):
    the same JSON value continues the run; another value, or a space inside a string, is another."""
    from apps.gateway.sessions import loose_prefix_hashes

    def conversation(arguments):
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": arguments},
        }
        return loose_prefix_hashes(
            [{"role": "user", "content": TASK}, {"role": "assistant", "content": None, "tool_calls": [call]}]
        )[-1]

    given = conversation('{"city": "Paris", "days": 2}')
    assert conversation('{"city":"Paris","days":2}') == given
    assert conversation('{ "days" : 2,\n "city": "Paris" }') == given
    assert conversation('{"city": "Pa ris", "days": 2}') != given
    assert conversation('{"city": "Paris", "days": 3}') != given
    assert conversation("not json,  spaced") == conversation("not json, spaced")
