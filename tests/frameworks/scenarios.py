"""Each framework's runs, written as its own documentation writes an agent, pointed at `base_url` with `key`
and nothing else changed (the model is the served model's name; temperature 0 so that the embedded server
decodes greedily). The same functions run twice: against the capture stand-in (capture.py), which records what
they send, and against the real gateway, which the tests check. Framework imports stay inside the functions:
the tier's conftest turns the frameworks' tracing and telemetry off before any of them is imported.

A run answers a `Run`: the texts the framework returned, in order, and the arguments every get_weather call
received."""

import asyncio
import uuid
from dataclasses import dataclass, field

from tests.frameworks.capture import WEATHER_QUESTION, WEATHER_RESULT

MODEL = "framework-model"
HELLO, AND_THEN = "Hello", "And then?"
WEATHER_DOC = "Current weather in a city."


@dataclass
class Run:
    texts: list = field(default_factory=list)
    weather_calls: list = field(default_factory=list)
    session_id: str | None = None
    completion_ids: list = field(default_factory=list)


def _openai_url(base_url: str) -> str:
    return f"{base_url}/v1"


# ---- OpenAI Agents SDK (its default mode: the Responses API) ------------------------------------------------


def _agents(base_url: str, key: str):
    import agents
    from openai import AsyncOpenAI

    agents.set_default_openai_client(AsyncOpenAI(base_url=_openai_url(base_url), api_key=key, max_retries=0))
    return agents


def agents_tool_turn(base_url: str, key: str) -> Run:
    agents = _agents(base_url, key)
    run = Run()

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        run.weather_calls.append({"city": city})
        return WEATHER_RESULT

    agent = agents.Agent(
        name="weather",
        model=MODEL,
        tools=[get_weather],
        model_settings=agents.ModelSettings(temperature=0),
    )
    run.texts.append(agents.Runner.run_sync(agent, WEATHER_QUESTION, max_turns=3).final_output)
    return run


def _agents_greeter(agents):
    return agents.Agent(name="greeter", model=MODEL, model_settings=agents.ModelSettings(temperature=0))


def agents_two_turns(base_url: str, key: str) -> Run:
    agents = _agents(base_url, key)
    agent, run = _agents_greeter(agents), Run()
    first = agents.Runner.run_sync(agent, HELLO)
    second = agents.Runner.run_sync(agent, first.to_input_list() + [{"role": "user", "content": AND_THEN}])
    run.texts += [first.final_output, second.final_output]
    return run


def agents_streamed(base_url: str, key: str) -> Run:
    """The first turn of agents_two_turns, streamed (the capture serves no streamed Responses, and needs
    none: the request is the same)."""
    agents = _agents(base_url, key)
    run = Run()

    async def stream() -> None:
        result = agents.Runner.run_streamed(_agents_greeter(agents), HELLO)
        deltas = [
            event.data.delta
            async for event in result.stream_events()
            if event.type == "raw_response_event" and event.data.type == "response.output_text.delta"
        ]
        run.texts += ["".join(deltas), result.final_output]

    asyncio.run(stream())
    return run


# ---- LangChain (ChatOpenAI) and LangGraph --------------------------------------------------------------------


def _chat_openai(base_url: str, key: str):
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=MODEL, base_url=_openai_url(base_url), api_key=key, temperature=0, max_retries=0)


def _langgraph_agent(base_url: str, key: str, run: Run, checkpointer=None):
    """LangGraph's tool loop: a model node with the tools bound, a ToolNode, and tools_condition between."""
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    @tool
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        run.weather_calls.append({"city": city})
        return WEATHER_RESULT

    model = _chat_openai(base_url, key).bind_tools([get_weather])
    graph = StateGraph(MessagesState)
    graph.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    graph.add_node("tools", ToolNode([get_weather]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=checkpointer)


def langgraph_tool_turn(base_url: str, key: str) -> Run:
    run = Run()
    state = _langgraph_agent(base_url, key, run).invoke({"messages": [("user", WEATHER_QUESTION)]})
    run.texts.append(state["messages"][-1].content)
    return run


def langgraph_two_turns(base_url: str, key: str) -> Run:
    """Two turns of one LangGraph thread: the checkpointer carries the conversation."""
    from langgraph.checkpoint.memory import InMemorySaver

    run = Run()
    agent = _langgraph_agent(base_url, key, run, checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "conversation"}}
    for text in (HELLO, AND_THEN):
        run.texts.append(agent.invoke({"messages": [("user", text)]}, thread)["messages"][-1].content)
    return run


def langchain_streamed(base_url: str, key: str) -> Run:
    run = Run()
    chunks = [chunk.content for chunk in _chat_openai(base_url, key).stream([("user", HELLO)])]
    run.texts.append("".join(chunks))
    return run


# ---- Pydantic AI ---------------------------------------------------------------------------------------------


def _pydantic_agent(base_url: str, key: str, run: Run):
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=_openai_url(base_url), api_key=key))
    agent = Agent(model, model_settings={"temperature": 0})

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        run.weather_calls.append({"city": city})
        return WEATHER_RESULT

    return agent


def pydantic_tool_turn(base_url: str, key: str) -> Run:
    run = Run()
    run.texts.append(_pydantic_agent(base_url, key, run).run_sync(WEATHER_QUESTION).output)
    return run


def pydantic_two_turns(base_url: str, key: str) -> Run:
    run = Run()
    agent = _pydantic_agent(base_url, key, run)
    first = agent.run_sync(HELLO)
    second = agent.run_sync(AND_THEN, message_history=first.all_messages())
    run.texts += [first.output, second.output]
    return run


def pydantic_streamed(base_url: str, key: str) -> Run:
    run = Run()
    agent = _pydantic_agent(base_url, key, run)

    async def stream() -> None:
        async with agent.run_stream(HELLO) as result:
            run.texts.append("".join([delta async for delta in result.stream_text(delta=True)]))

    asyncio.run(stream())
    return run


# ---- smolagents (ToolCallingAgent, its default prompts) -------------------------------------------------------


def _smolagent(base_url: str, key: str, run: Run, **options):
    """smolagents writes the tool calls it was given and their results back as text ("Calling tools: [...]",
    "Observation: ..."), so no message prefix links one of its calls to the reply before: the agent names its
    run's session in its base URL instead (`<gateway>/s/<session id>/v1`, a new id per agent)."""
    from smolagents import OpenAIServerModel, ToolCallingAgent, tool

    @tool
    def get_weather(city: str) -> str:
        """Current weather in a city.

        Args:
            city: The city's name.
        """
        run.weather_calls.append({"city": city})
        return WEATHER_RESULT

    run.session_id = uuid.uuid4().hex
    session_url = f"{base_url}/s/{run.session_id}/v1"
    model = OpenAIServerModel(model_id=MODEL, api_base=session_url, api_key=key, temperature=0)
    return ToolCallingAgent(tools=[get_weather], model=model, max_steps=3, **options)


def smolagents_tool_turn(base_url: str, key: str) -> Run:
    run = Run()
    run.texts.append(_smolagent(base_url, key, run).run(WEATHER_QUESTION))
    return run


def smolagents_two_turns(base_url: str, key: str) -> Run:
    run = Run()
    agent = _smolagent(base_url, key, run)
    run.texts += [agent.run(HELLO), agent.run(AND_THEN, reset=False)]
    return run


def smolagents_streamed(base_url: str, key: str) -> Run:
    """The model's answer streamed (`stream_outputs`), the run's steps streamed too."""
    from smolagents.memory import FinalAnswerStep
    from smolagents.models import ChatMessageStreamDelta

    run = Run()
    events = list(_smolagent(base_url, key, run, stream_outputs=True).run(HELLO, stream=True))
    run.texts.append(sum(isinstance(event, ChatMessageStreamDelta) for event in events))
    run.texts += [event.output for event in events if isinstance(event, FinalAnswerStep)]
    return run


# ---- AReaL's OpenAIProxyClient -------------------------------------------------------------------------------


def areal_session(base_url: str, key: str) -> Run:
    """AReaL's client as its agent workflows use it: the client starts a session with the admin (here: the
    tenant's) key, the agent talks to `<base>/v1` with the session's key, rewards go on the first completion
    and on the last, and leaving the block ends the session."""
    import aiohttp
    from openai import AsyncOpenAI

    from tests.frameworks.areal_client import OpenAIProxyClient

    run = Run()

    async def session() -> None:
        async with aiohttp.ClientSession() as http:
            client = OpenAIProxyClient(session=http, base_url=base_url, task_id="greeting", admin_api_key=key)
            async with client:
                run.session_id = client.session_id
                agent = AsyncOpenAI(
                    base_url=_openai_url(base_url), api_key=client.session_api_key, max_retries=0
                )
                conversation = [{"role": "user", "content": HELLO}]
                for follow_up in (AND_THEN, None):
                    answer = await agent.chat.completions.create(
                        model=MODEL, messages=conversation, temperature=0
                    )
                    run.completion_ids.append(answer.id)
                    run.texts.append(answer.choices[0].message.content)
                    if follow_up:
                        conversation += [
                            {"role": "assistant", "content": answer.choices[0].message.content},
                            {"role": "user", "content": follow_up},
                        ]
                await client.set_reward(run.completion_ids[0], 0.25)
                await client.set_last_reward(1.0)

    asyncio.run(session())
    return run


# What the capture runs (the streamed runs of the Agents SDK reuse its two-turn run's first request).
CAPTURED = [
    agents_tool_turn,
    agents_two_turns,
    langgraph_tool_turn,
    langgraph_two_turns,
    langchain_streamed,
    pydantic_tool_turn,
    pydantic_two_turns,
    pydantic_streamed,
    smolagents_tool_turn,
    smolagents_two_turns,
    smolagents_streamed,
    areal_session,
]
