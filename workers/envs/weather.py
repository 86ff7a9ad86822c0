"""The weather desk: a two-turn, tool-using agent task whose success a program checks.

A user asks for the current temperature in a city. The agent has two tools, `get_weather` (now) and
`get_forecast` (tomorrow); it must call `get_weather` with that city, read the tool's JSON answer and reply
with the number it returned. The world is a pure function of the task, so an episode can be checked,
replayed and scored offline. Tasks split into training and held-out sets by a hash of their
(city, temperature) pair, so no held-out pair is ever seen in training traffic.

Two scripted policies: `scripted_episode()` is the ideal transcript (corrections, the reference), and
`legacy_episode()` imitates the agent's logs before it learned anything: it calls the right tool only
some of the time, otherwise asks for the forecast or answers from memory. A base policy cloned from
those logs has the skills (tool-call format, copying the city and the number) but a poor habit, which is
what online RL from user feedback is there to fix.
"""

import hashlib
import json
import random
import re
from dataclasses import dataclass

CITIES = (
    "Paris",
    "Tokyo",
    "Berlin",
    "Lagos",
    "Lima",
    "Oslo",
    "Cairo",
    "Delhi",
    "Austin",
    "Seoul",
    "Rome",
    "Quito",
)
# Cities that never occur in training traffic or held-out cases (make_tasks draws from CITIES only): a
# scenario shifts live traffic to them (workers/envs/scenarios.py) so that the drift can be measured.
NEW_CITIES = ("Nairobi", "Hanoi", "Dublin", "Perth")
TEMPERATURES = range(0, 36)  # each " N" is one token of the default tokenizer
# The city opens the message, as in a chat ("Oslo: how warm is it?"): it is then the same token as in the
# tool call's JSON (the default tokenizer has one token for " Oslo" and another for "Oslo").
QUESTIONS = ("{city}: what is the temperature now?",)
SYSTEM_PROMPT = "You are a weather assistant."
TOOL_NAME = "get_weather"
FORECAST_TOOL = "get_forecast"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": "Temperature now",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
]
HELD_OUT_SHARE = 5  # one pair in five is held out
# The legacy agent's habits (see legacy_episode): shares of right tool, wrong tool, no tool.
LEGACY_HABITS = (("weather", 0.35), ("memory", 0.65))


@dataclass(frozen=True)
class Task:
    task_id: str
    city: str
    temperature: int
    question: str

    def opening(self) -> list[dict]:
        """The messages an agent starts the episode with."""
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": self.question}]

    @property
    def forecast(self) -> int:
        """Tomorrow's temperature: a pure function of the task, never equal to today's."""
        shift = 1 + int(hashlib.sha256(f"forecast:{self.city}:{self.temperature}".encode()).digest()[0]) % 6
        return (
            self.temperature + shift
            if self.temperature + shift <= max(TEMPERATURES)
            else self.temperature - shift
        )


@dataclass(frozen=True)
class Outcome:
    called_tool: bool
    right_city: bool
    answered: bool
    right_temperature: bool
    reason: str
    right_tool: bool = True

    @property
    def success(self) -> bool:
        return self.called_tool and self.right_tool and self.right_city and self.right_temperature


def is_held_out(city: str, temperature: int) -> bool:
    digest = hashlib.sha256(f"{city}:{temperature}".encode()).digest()
    return digest[0] % HELD_OUT_SHARE == 0


def make_tasks(*, split: str, count: int, seed: int) -> list[Task]:
    """`count` tasks of the `train` or `heldout` split, drawn reproducibly from `seed`."""
    if split not in {"train", "heldout"}:
        raise ValueError("split is 'train' or 'heldout'")
    pairs = [
        (city, degrees)
        for city in CITIES
        for degrees in TEMPERATURES
        if is_held_out(city, degrees) == (split == "heldout")
    ]
    rng = random.Random(f"{split}:{seed}")
    tasks = []
    for number in range(count):
        city, degrees = rng.choice(pairs)
        question = rng.choice(QUESTIONS).format(city=city)
        tasks.append(
            Task(
                task_id=f"weather-{split}-{seed}-{number}", city=city, temperature=degrees, question=question
            )
        )
    return tasks


def tool_result(task: Task, name: str, arguments: str | dict) -> str:
    """What the environment's tool answers to one call."""
    if name not in (TOOL_NAME, FORECAST_TOOL):
        return json.dumps({"error": f"unknown tool {name!r}"})
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
    except (TypeError, ValueError):
        return json.dumps({"error": "arguments are not valid JSON"})
    if not isinstance(parsed, dict):
        return json.dumps({"error": "arguments are not a JSON object"})
    city = str(parsed.get("city", "")).strip()
    if city.lower() != task.city.lower():
        return json.dumps({"error": f"no weather station for {city!r}"})
    degrees = task.temperature if name == TOOL_NAME else task.forecast
    return json.dumps({"city": task.city, "temperature": degrees})


def _numbers(text: str) -> list[int]:
    return [int(match) for match in re.findall(r"-?\d+", text or "")]


def _call_arguments(function: dict) -> dict:
    raw = function.get("arguments")
    try:
        parsed = json.loads(raw or "{}") if isinstance(raw, str) else dict(raw or {})
    except (TypeError, ValueError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def check(task: Task, transcript: list[dict], *, right_tools: tuple[str, ...] = (TOOL_NAME,)) -> Outcome:
    """Judges an episode from its messages (the opening, then the agent's and the tool's turns): the
    first tool call must be `get_weather` (or another of `right_tools`: a scenario's world may offer a
    second version of it) for the task's city, and the last answer must hold the number."""
    calls = [
        call
        for message in transcript
        if message.get("role") == "assistant"
        for call in message.get("tool_calls") or []
    ]
    answers = [
        message
        for message in transcript
        if message.get("role") == "assistant"
        and not message.get("tool_calls")
        and (message.get("content") or "").strip()
    ]
    right_temperature = bool(answers) and task.temperature in _numbers(answers[-1]["content"])
    if not calls:
        return Outcome(False, False, bool(answers), right_temperature, "no tool call", right_tool=False)
    function = calls[0].get("function", calls[0])
    right_tool = function.get("name") in right_tools
    right_city = str(_call_arguments(function).get("city", "")).strip().lower() == task.city.lower()
    if not answers:
        return Outcome(True, right_city, False, False, "no final answer", right_tool=right_tool)
    if not right_tool:
        reason = "wrong tool"
    elif not right_city:
        reason = "wrong city"
    elif not right_temperature:
        reason = "wrong temperature"
    else:
        reason = "ok"
    return Outcome(True, right_city, True, right_temperature, reason, right_tool=right_tool)


def reference_answer(task: Task) -> str:
    return f"It is {task.temperature} degrees."


def _tool_episode(task: Task, tool: str) -> list[dict]:
    call_id = f"call_{task.task_id}"
    result = tool_result(task, tool, {"city": task.city})
    degrees = json.loads(result)["temperature"]
    return task.opening() + [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": tool, "arguments": json.dumps({"city": task.city})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": result},
        {"role": "assistant", "content": f"It is {degrees} degrees."},
    ]


def scripted_episode(task: Task) -> list[dict]:
    """The ideal episode, for supervised warm-up and for corrections."""
    return _tool_episode(task, TOOL_NAME)


def legacy_episode(task: Task, rng: random.Random, habits=LEGACY_HABITS) -> list[dict]:
    """One episode of the legacy agent: the right tool, the forecast tool, or an answer from memory,
    drawn with the shares in `habits`; the skills are intact, only the habit is poor."""
    habit = rng.choices([name for name, _ in habits], weights=[share for _, share in habits])[0]
    if habit == "weather":
        return _tool_episode(task, TOOL_NAME)
    if habit == "ignore":
        episode = _tool_episode(task, TOOL_NAME)
        return episode[:-1] + [{"role": "assistant", "content": f"It is {rng.choice(TEMPERATURES)} degrees."}]
    return task.opening() + [{"role": "assistant", "content": f"It is {rng.choice(TEMPERATURES)} degrees."}]
