"""An unmodified tool-using agent built on the official openai SDK: only its base URL and key point it
at areal-web. It runs one episode of an environment task and returns what happened."""

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from workers.envs import weather

if TYPE_CHECKING:
    from workers.envs.scenarios import World


@dataclass
class Episode:
    task: weather.Task
    transcript: list[dict]
    completion_ids: list[str] = field(default_factory=list)  # the gateway's step ids (interaction ids)
    session_id: str | None = None
    error: str | None = None
    world: "World | None" = None  # a scenario's world judges with the tools it offers

    @property
    def outcome(self) -> weather.Outcome:
        if self.world is not None:
            return self.world.check(self.task, self.transcript)
        return weather.check(self.task, self.transcript)


def run_episode(
    client,
    *,
    model: str,
    task: weather.Task,
    max_turns: int = 3,
    max_tokens: int = 48,
    temperature: float = 1.0,
    extra_headers: dict | None = None,
    world: "World | None" = None,
) -> Episode:
    """`client` is an `openai.OpenAI`; tool calls are answered by the environment until the agent
    replies in words or `max_turns` calls were made. Transport errors end the episode (recorded). A
    scenario's `world` (workers/envs/scenarios.py) gives the tool list and the tools' answers; without one
    they are weather.TOOLS and weather.tool_result."""
    import openai

    messages = task.opening()
    episode = Episode(task=task, transcript=messages, world=world)
    answer = weather.tool_result if world is None else world.tool_result
    for _ in range(max_turns):
        try:
            raw = client.chat.completions.with_raw_response.create(
                model=model,
                messages=messages,
                tools=weather.TOOLS if world is None else world.tools(),
                max_tokens=max_tokens,
                temperature=temperature,
                extra_headers=extra_headers or {},
            )
        except openai.APIError as error:
            episode.error = f"{type(error).__name__}: {error}"
            break
        reply = raw.parse()
        episode.session_id = episode.session_id or raw.headers.get("x-session-id")
        episode.completion_ids.append(reply.id)
        message = reply.choices[0].message
        calls = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }
            for call in message.tool_calls or []
        ]
        messages.append(
            {
                "role": "assistant",
                "content": message.content or "",
                **({"tool_calls": calls} if calls else {}),
            }
        )
        if not calls:
            break
        for call in calls:
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "content": answer(task, call["function"]["name"], call["function"]["arguments"]),
                }
            )
    return episode
