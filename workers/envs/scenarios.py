"""Scenarios for the evolution control plane: a `World` that the simulated traffic and the tools consult,
switched at run time, and the scenarios that switch it (what, when, and what the control plane is expected
to decide). No Django.

A `World` with no scenario is the weather desk as it always was: the agent's tool list is `weather.TOOLS`,
tool results are `weather.tool_result`'s, tasks are the traffic's own. A scenario's switches take effect at
their time (seconds after `World.start()`), read lazily by every call under one lock, so the traffic's
threads and the agent's tool calls see one state; `World.switch()` switches by hand. The switches:

- `offer_tools` (a list of tool names): the agent can run them (its registry has them) though the tool
  list it sends is unchanged; `get_weather_v2` answers as `get_weather` does and is judged a right tool;
- `advertise_tools` (a list of tool names): offered, and also in the tool list the agent sends, before
  `get_weather` (after it, the demo's base stops calling tools at all: 0 % held-out; before it, 16 %
  against 22 %). The gateway applies a harness route `get_weather → get_weather_v2` only to requests that
  offer the target, hides the target from the model and renames its `get_weather` calls, so a routed
  request shows the model the default tool list again;
- `tool_faults` (`{tool: [city, ...]}`): that tool answers `{"error": "station <city> offline"}` for
  those cities (the failed tool results a tool-failure cluster groups);
- `city_shift` (`{"cities": [...], "share": x}`): a share of the traffic asks about other cities
  (`weather.NEW_CITIES`, never in training);
- `question_shift` (`{"question": "{city}: ...", "prefix": "..."}`): the traffic asks in another phrasing,
  and its task ids take a prefix;
- `bad_release` (`{"noise": x, "seed": n, "production_success": s}`): asks the host (the demo) to release a
  degraded copy of production (`write_degraded_checkpoint`) once production's held-out success is at least
  `s` (a copy of a poor production is hardly worse than it: nothing for a canary to see); the world only
  records the request (`take_requests`), and the host notes when it sent the release (`note`:
  `bad_release_sent`);
- `reset`: back to the default world.

`World.events` lists each switch with its time (`seconds` after the start and the unix time `at`), and what
the host noted it did (`World.note`), for a benchmark to measure reaction times against decisions'
timestamps.
"""

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from workers.envs import weather

WEATHER_V2 = "get_weather_v2"
EXTRA_TOOLS = {
    WEATHER_V2: {
        "type": "function",
        "function": {
            "name": WEATHER_V2,
            "description": "Temperature now (version 2)",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
}
EQUIVALENT_TOOLS = {WEATHER_V2: weather.TOOL_NAME}  # a tool version → the tool whose answers it gives
SWITCHES = (
    "offer_tools",
    "advertise_tools",
    "tool_faults",
    "city_shift",
    "question_shift",
    "bad_release",
    "reset",
)
# A third of the cities whose station goes offline in the tool-failure scenario.
FAULTY_CITIES = ("Oslo", "Lima", "Cairo", "Seoul")
# A phrasing that costs the demo's base about half its success (22 % → 12 % held-out, bench/evolution/calibrate.py):
# "{city}: how warm is it now?" costs all of it (0 %: it never calls the tool), and nothing is left to learn from.
SHIFTED_QUESTION = "{city}: what is the temperature right now?"
SHIFTED_PREFIX = "shifted-"
# Decisions that are a reaction to something (not the routine learning loop's evaluate / release / promote):
# one of them while nothing was switched is a false alarm.
ALARM_KINDS = ("train", "rollback", "pause_learning", "restart_learner", "update_harness")


@dataclass(frozen=True)
class Switch:
    at: float  # seconds after the world starts
    what: str  # one of SWITCHES
    value: Any = None

    def __post_init__(self):
        if self.what not in SWITCHES:
            raise ValueError(f"unknown switch {self.what!r}; one of {', '.join(SWITCHES)}")
        if self.at < 0:
            raise ValueError("a switch's time is seconds after the start, at least 0")


@dataclass(frozen=True)
class Expectation:
    """What the control plane should decide: a decision of one of `kinds` within `within_seconds` of the
    event named `after` (the reaction: a switch, or what the host noted), then one of each of `then`;
    `recovers`: live success comes back to its level before the switch. `trigger`: the switch that sets it
    going, when `after` is the host's note rather than a switch. No `kinds`: no decision at all (every alarm
    is a false one)."""

    kinds: tuple[str, ...] = ()
    within_seconds: float = 0.0
    after: str = ""
    trigger: str = ""
    then: tuple[str, ...] = ()
    recovers: bool = False


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    switches: tuple[Switch, ...]
    expects: Expectation
    duration_seconds: float  # how long the loop should run to see the expectation through

    def trigger(self) -> Switch | None:
        """The switch the reaction time counts from (the expectation's `after`)."""
        name = self.expects.trigger or self.expects.after
        return next((switch for switch in self.switches if switch.what == name), None)

    def with_trigger_at(self, seconds: float) -> "Scenario":
        """The same scenario with its trigger moved to `seconds` (the demo's DEMO_SCENARIO_AT); the
        duration keeps the same time after it."""
        trigger = self.trigger()
        if trigger is None:
            return self
        shift = seconds - trigger.at
        switches = tuple(
            replace(switch, at=seconds) if switch is trigger else switch for switch in self.switches
        )
        return replace(self, switches=switches, duration_seconds=max(self.duration_seconds + shift, seconds))


SCENARIOS: dict[str, Scenario] = {
    "tool_failure": Scenario(
        name="tool_failure",
        description=(
            "get_weather_v2 is in the agent's tool list from the start (before get_weather); after 60 s "
            'get_weather answers {"error": "station <city> offline"} for a third of the cities. A '
            "tool-failure cluster forms and the control plane routes get_weather to get_weather_v2 (a "
            "harness update: the model then sees the default tool list, its calls reach v2) or rolls back."
        ),
        switches=(
            Switch(0, "advertise_tools", [WEATHER_V2]),
            Switch(60, "tool_faults", {weather.TOOL_NAME: list(FAULTY_CITIES)}),
        ),
        expects=Expectation(kinds=("update_harness", "rollback"), within_seconds=120, after="tool_faults"),
        duration_seconds=300,
    ),
    "drift": Scenario(
        name="drift",
        description=(
            "After 60 s every user asks in a new phrasing (task ids prefixed 'shifted-'); the input "
            "distribution drifts, training is triggered, and live success comes back to its level before."
        ),
        switches=(Switch(60, "question_shift", {"question": SHIFTED_QUESTION, "prefix": SHIFTED_PREFIX}),),
        expects=Expectation(kinds=("train",), within_seconds=120, after="question_shift", recovers=True),
        duration_seconds=480,
    ),
    "drift_cities": Scenario(
        name="drift_cities",
        description=(
            "After 60 s three quarters of the traffic asks about cities never seen in training "
            "(weather.NEW_CITIES): drift, training, recovery as in `drift`."
        ),
        switches=(Switch(60, "city_shift", {"cities": list(weather.NEW_CITIES), "share": 0.75}),),
        expects=Expectation(kinds=("train",), within_seconds=120, after="city_shift", recovers=True),
        duration_seconds=480,
    ),
    "bad_release": Scenario(
        name="bad_release",
        description=(
            "After 60 s, once production's held-out success is at least 50 %, a degraded copy of production "
            "(each weight plus a quarter of its RMS times N(0, 1): the demo's base goes from 22 % to 3 % "
            "held-out) is released; its canary breaks a guardrail: rollback, and the learner restarted from "
            "production."
        ),
        switches=(Switch(60, "bad_release", {"noise": 0.25, "seed": 0, "production_success": 0.5}),),
        expects=Expectation(
            kinds=("rollback",),
            within_seconds=90,
            after="bad_release_sent",
            trigger="bad_release",
            then=("restart_learner",),
        ),
        duration_seconds=420,
    ),
    "stationary": Scenario(
        name="stationary",
        description="Ten minutes of the default traffic, nothing switched: no decision is expected.",
        switches=(),
        expects=Expectation(),
        duration_seconds=600,
    ),
}


def scenario_named(name: str, *, at: float | None = None) -> Scenario | None:
    """The scenario called `name` ('' or 'none': None), its trigger moved to `at` seconds if given."""
    if name in ("", "none"):
        return None
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; one of {', '.join(SCENARIOS)}")
    scenario = SCENARIOS[name]
    return scenario if at is None else scenario.with_trigger_at(at)


def _fraction(text: str) -> float:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") / 2**64


def _called_city(arguments: str | dict) -> str | None:
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
    except (TypeError, ValueError):
        return None
    return str(parsed.get("city", "")).strip() if isinstance(parsed, dict) else None


def _plain(value):
    """JSON-ready copy of a switch's value (events are written to a summary)."""
    return json.loads(json.dumps(value, default=sorted)) if value is not None else None


@dataclass
class _State:
    offered: tuple[str, ...] = ()
    advertised: tuple[str, ...] = ()
    faults: dict[str, frozenset[str]] = field(default_factory=dict)  # tool → lower-case cities
    cities: tuple[str, ...] = ()
    city_share: float = 0.0
    question: str | None = None
    prefix: str = ""


class World:
    """The state of the simulated world, shared by the traffic's threads; see the module's docstring."""

    def __init__(self, scenario: Scenario | None = None, *, clock: Callable[[], float] = time.time):
        self.scenario = scenario
        self._clock = clock
        self._lock = threading.Lock()
        self._state = _State()
        self._pending = sorted(scenario.switches, key=lambda switch: switch.at) if scenario else []
        self._requests: list[dict] = []
        self.started_at: float | None = None
        self.events: list[dict] = []

    def start(self) -> "World":
        """Starts the scenario's clock (once; a second call changes nothing)."""
        with self._lock:
            if self.started_at is None:
                self.started_at = self._clock()
        return self

    def seconds(self) -> float:
        """Seconds since the start (0 before it)."""
        return 0.0 if self.started_at is None else self._clock() - self.started_at

    def switch(self, what: str, value=None) -> None:
        """Switches now, by hand (recorded in `events` like a scenario's switch)."""
        Switch(0, what, value)  # validates
        with self._lock:
            self._advance()
            now = self._clock()
            self._apply(what, value, now, now - (self.started_at if self.started_at is not None else now))

    def note(self, what: str, value=None) -> None:
        """Records in `events` what the host did for the scenario (the demo's `bad_release_sent`), with its
        time, so that a reaction can be measured from it."""
        with self._lock:
            now = self._clock()
            seconds = now - (self.started_at if self.started_at is not None else now)
            self.events.append(
                {"what": what, "value": _plain(value), "seconds": round(seconds, 3), "at": round(now, 3)}
            )

    def _advance(self) -> None:
        if self.started_at is None:
            return
        elapsed = self._clock() - self.started_at
        while self._pending and self._pending[0].at <= elapsed:
            switch = self._pending.pop(0)
            self._apply(switch.what, switch.value, self.started_at + switch.at, switch.at)

    def _apply(self, what: str, value, at: float, seconds: float) -> None:
        state = self._state
        if what == "reset":
            self._state = _State()
        elif what in ("offer_tools", "advertise_tools"):
            unknown = [name for name in value if name not in EXTRA_TOOLS]
            if unknown:
                raise ValueError(f"no such extra tool: {', '.join(unknown)}")
            state.offered = tuple(dict.fromkeys([*state.offered, *value]))
            if what == "advertise_tools":
                state.advertised = tuple(dict.fromkeys([*state.advertised, *value]))
        elif what == "tool_faults":
            state.faults = {
                tool: frozenset(city.lower() for city in cities) for tool, cities in (value or {}).items()
            }
        elif what == "city_shift":
            state.cities = tuple((value or {}).get("cities") or ())
            state.city_share = float((value or {}).get("share", 1.0)) if state.cities else 0.0
        elif what == "question_shift":
            state.question = (value or {}).get("question") or None
            state.prefix = (value or {}).get("prefix", "") if state.question else ""
        elif what == "bad_release":
            self._requests.append({"what": what, "value": _plain(value), "at": at})
        self.events.append(
            {"what": what, "value": _plain(value), "seconds": round(seconds, 3), "at": round(at, 3)}
        )

    # What the traffic and the agent consult.

    def tools(self) -> list[dict]:
        """The tool list the agent sends: weather.TOOLS, after the advertised extra tools."""
        with self._lock:
            self._advance()
            advertised = self._state.advertised
        return (
            weather.TOOLS if not advertised else [*(EXTRA_TOOLS[name] for name in advertised), *weather.TOOLS]
        )

    def right_tools(self) -> tuple[str, ...]:
        """The tools a successful episode may call first: get_weather and the versions of it on offer."""
        with self._lock:
            self._advance()
            offered = self._state.offered
        return (
            weather.TOOL_NAME,
            *(name for name in offered if EQUIVALENT_TOOLS.get(name) == weather.TOOL_NAME),
        )

    def tool_result(self, task: weather.Task, name: str, arguments: str | dict) -> str:
        """What a tool answers in this world: a fault for a faulty tool's offline cities, an offered tool
        version answering as the tool it versions, otherwise weather.tool_result."""
        with self._lock:
            self._advance()
            faulty = self._state.faults.get(name, frozenset())
            offered = name in self._state.offered
        city = _called_city(arguments)
        if city and city.lower() in faulty:
            return json.dumps({"error": f"station {city} offline"})
        return weather.tool_result(task, EQUIVALENT_TOOLS.get(name, name) if offered else name, arguments)

    def check(self, task: weather.Task, transcript: list[dict]) -> weather.Outcome:
        return weather.check(task, transcript, right_tools=self.right_tools())

    def shape(self, task: weather.Task) -> weather.Task:
        """The traffic's next task as this world asks it: another city for a share of the tasks (chosen by
        a hash of the task id, so the same task is always shaped the same way), another phrasing."""
        with self._lock:
            self._advance()
            state = self._state
            cities, share, question, prefix = state.cities, state.city_share, state.question, state.prefix
        if not cities and question is None:
            return task
        city = task.city
        if cities and _fraction(f"share:{task.task_id}") < share:
            city = cities[int(_fraction(f"city:{task.task_id}") * len(cities))]
        text = (question or "").format(city=city) if question else task.question.replace(task.city, city)
        return weather.Task(
            task_id=f"{prefix}{task.task_id}", city=city, temperature=task.temperature, question=text
        )

    def take_requests(self, what: str) -> list[dict]:
        """The host's share of the switches (`bad_release`) that came due and were not taken yet."""
        with self._lock:
            self._advance()
            taken = [request for request in self._requests if request["what"] == what]
            self._requests = [request for request in self._requests if request["what"] != what]
        return taken

    def summary(self) -> dict:
        """The scenario's part of a run's summary: its name, expectation, start and events."""
        with self._lock:
            self._advance()
            events = list(self.events)
        scenario = self.scenario
        return {
            "name": scenario.name if scenario else "none",
            "description": scenario.description if scenario else "",
            "expects": {
                "kinds": list(scenario.expects.kinds),
                "within_seconds": scenario.expects.within_seconds,
                "after": scenario.expects.after,
                "then": list(scenario.expects.then),
                "recovers": scenario.expects.recovers,
            }
            if scenario
            else {},
            "trigger_seconds": trigger.at if scenario and (trigger := scenario.trigger()) else None,
            "started_at": self.started_at,
            "events": events,
        }


def write_degraded_checkpoint(
    source_dir: str | Path, out_dir: str | Path, *, noise: float = 0.25, seed: int = 0
) -> Path:
    """Copies a checkpoint directory (safetensors shards, config, tokenizer) to out_dir with every
    floating-point weight w replaced by w + noise * rms(w) * N(0, 1) (the root mean square, so constant
    tensors such as fresh norm weights move too): the same architecture, tokenizer and
    shapes, so it loads and serves anywhere production does, but answers worse (a release that should
    fail its guardrails). Writes `degraded.json` (noise, seed, source) beside it."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    source, out = Path(source_dir), Path(out_dir)
    shards = sorted(source.glob("*.safetensors"))
    if not shards:
        raise FileNotFoundError(f"no safetensors shard in {source}")
    shutil.copytree(source, out, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.safetensors"))
    generator = torch.Generator().manual_seed(seed)
    for shard in shards:
        tensors = load_file(shard)
        degraded = {}
        for name, tensor in sorted(tensors.items()):
            if tensor.is_floating_point():
                spread = tensor.float().pow(2).mean().sqrt()
                draw = torch.randn(tensor.shape, generator=generator, dtype=torch.float32)
                tensor = (tensor.float() + noise * spread * draw).to(tensor.dtype)
            degraded[name] = tensor.contiguous()
        save_file(degraded, out / shard.name, metadata={"format": "pt"})
    (out / "degraded.json").write_text(
        json.dumps({"noise": noise, "seed": seed, "source": str(source)}) + "\n"
    )
    return out


def success_timeline(history, *, started_at: float, bucket_seconds: float = 30.0) -> list[dict]:
    """Live success by `bucket_seconds` since `started_at`, from (unix time, success) pairs (the traffic's
    `stats.history`): [{"seconds": start of the bucket, "episodes", "success"}]."""
    buckets: dict[int, list[bool]] = {}
    for at, success in history:
        if at >= started_at:
            buckets.setdefault(int((at - started_at) // bucket_seconds), []).append(bool(success))
    return [
        {
            "seconds": index * bucket_seconds,
            "episodes": len(outcomes),
            "success": round(sum(outcomes) / len(outcomes), 4),
        }
        for index, outcomes in sorted(buckets.items())
    ]
