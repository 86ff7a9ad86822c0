"""Simulated live traffic for the demo (no Django): users drive the unmodified openai-SDK agent through the
gateway, each conversation an AReaL-style RL session, and give feedback through the public API.

One user's turn: POST /rl/start_session (429 → wait Retry-After: the online run's back-pressure) → the agent's
episode with the session key as its api_key → thumbs (and sometimes a correction) via POST /v1/rewards with
source `user` → POST /rl/end_session. Counters are kept for the terminal's live figures, and each episode's
outcome by session id (`outcomes`, the latest `OUTCOMES_KEPT`): the simulated annotator
(workers/envs/annotator.py), who labels through the annotation API, reads its ground truth there.
"""

import random
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from workers.envs import weather
from workers.envs.agent import run_episode
from workers.envs.scenarios import World
from workers.envs.users import SimulatedUser

OUTCOMES_KEPT = 20_000


@dataclass
class TrafficStats:
    episodes: int = 0
    successes: int = 0
    thumbs_up: int = 0
    corrections: int = 0
    held_back: int = 0  # 429 answers of /rl/start_session
    errors: int = 0
    rejected_rewards: int = 0
    last_problem: str = ""
    recent: deque = field(
        default_factory=lambda: deque(maxlen=64)
    )  # (success, reward) of the latest episodes
    history: deque = field(
        default_factory=lambda: deque(maxlen=OUTCOMES_KEPT)
    )  # (unix time, success) of every episode, for success before and after a scenario's switch
    lock: threading.Lock = field(default_factory=threading.Lock)

    def recent_success(self) -> float | None:
        with self.lock:
            return sum(s for s, _ in self.recent) / len(self.recent) if self.recent else None

    def recent_reward(self) -> float | None:
        with self.lock:
            return sum(r for _, r in self.recent) / len(self.recent) if self.recent else None


class UserThreads:
    """Simulated users, one daemon thread each, running `_user(number)` until `stop()`. A subclass sets `users`
    and `thread_name` and calls `super().__init__()`."""

    users: int
    thread_name = "user"

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self):
        for number in range(self.users):
            thread = threading.Thread(
                target=self._user, args=(number,), name=f"{self.thread_name}-{number}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=timeout)

    def _user(self, number: int) -> None:
        raise NotImplementedError


class Traffic(UserThreads):
    def __init__(
        self,
        *,
        gateway_url: str,
        api_key: str,
        model: str,
        users: int = 3,
        seed: int = 0,
        user: SimulatedUser | None = None,
        world: World | None = None,
    ):
        self.gateway_url, self.api_key, self.model = gateway_url.rstrip("/"), api_key, model
        self.users, self.seed = users, seed
        self.user = user or SimulatedUser()
        self.world = world  # a scenario's world (workers/envs/scenarios.py); None: the weather desk as is
        self.stats = TrafficStats()
        self.outcomes: OrderedDict = OrderedDict()  # session id -> the episode's Outcome (ground truth)
        super().__init__()

    thread_name = "demo-user"

    def start(self) -> "Traffic":
        if self.world is not None:
            self.world.start()
        return super().start()

    def _user(self, number: int) -> None:
        import httpx
        import openai

        rng = random.Random(f"user:{self.seed}:{number}")
        tasks = iter(weather.make_tasks(split="train", count=100_000, seed=self.seed * 1000 + number))
        http = httpx.Client(base_url=self.gateway_url, timeout=60)
        headers = {"Authorization": f"Bearer {self.api_key}"}
        while not self._stop.is_set():
            task = next(tasks) if self.world is None else self.world.shape(next(tasks))
            try:
                started = http.post("/rl/start_session", json={"task_id": task.task_id}, headers=headers)
                if started.status_code == 429:
                    with self.stats.lock:
                        self.stats.held_back += 1
                    self._stop.wait(float(started.headers.get("retry-after", "1")))
                    continue
                started.raise_for_status()
                session = started.json()
                client = openai.OpenAI(
                    base_url=f"{self.gateway_url}/v1", api_key=session["api_key"], max_retries=2
                )
                episode = run_episode(client, model=self.model, task=task, world=self.world)
                outcome = episode.outcome
                feedback = self.user.react(task, outcome, rng)
                session_headers = {"Authorization": f"Bearer {session['api_key']}"}
                reward_headers = headers
                target = {"session_id": session["session_id"]}
                rewards = [
                    {
                        **target,
                        "value": 1.0 if feedback.thumbs_up else 0.0,
                        "kind": "numeric",
                        "source": "user",
                        "idempotency_key": f"thumb-{session['session_id']}",
                    }
                ]
                if feedback.correction:
                    rewards.append(
                        {
                            **target,
                            "kind": "critique",
                            "label": feedback.correction,
                            "source": "user",
                            "idempotency_key": f"fix-{session['session_id']}",
                        }
                    )
                for reward in rewards:
                    answer = http.post("/v1/rewards", headers=reward_headers, json=reward)
                    if answer.status_code >= 400:
                        with self.stats.lock:
                            self.stats.rejected_rewards += 1
                            self.stats.last_problem = (
                                f"{reward['source']} {reward['kind']}: {answer.text[:200]}"
                            )
                http.post("/rl/end_session", json={}, headers=session_headers)
                with self.stats.lock:
                    self.outcomes[session["session_id"]] = outcome
                    while len(self.outcomes) > OUTCOMES_KEPT:
                        self.outcomes.popitem(last=False)
                    self.stats.episodes += 1
                    self.stats.successes += outcome.success
                    self.stats.thumbs_up += feedback.thumbs_up
                    self.stats.corrections += feedback.correction is not None
                    self.stats.recent.append((outcome.success, 1.0 if feedback.thumbs_up else 0.0))
                    self.stats.history.append((time.time(), outcome.success))
            except (httpx.HTTPError, openai.OpenAIError, KeyError, ValueError):
                with self.stats.lock:
                    self.stats.errors += 1
                self._stop.wait(1.0)
        http.close()
