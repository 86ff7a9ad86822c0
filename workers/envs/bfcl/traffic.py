"""Live BFCL traffic for the demo (no Django): simulated users send train-split cases to the unmodified
agent (agent.run_case) through the gateway, each case an AReaL-style RL session, and BFCL's checker's verdict
goes back as an environment reward through the public reward API (agent.reward_bodies), as a customer's own
evaluator would post it.

One session: POST /rl/start_session with a group (429 → wait Retry-After: the online run's back-pressure)
→ the case with the session key as the client's api_key and the session's id as its X-Session-Id → the
verdict posted by POST /v1/rewards (source `environment`) → POST /rl/end_session. Counters:
workers.envs.traffic.TrafficStats (success is the checker's verdict), per category (`by_category`: cases,
right), and the answers the checker accepted (`accepted`: what bench/bfcl's rejection-sampling baseline
trains on).

The group is the trainer's GRPO baseline (each answer's advantage is its reward less its group's mean in the
batch). With `group_size` 1 (the default) it is the case's category, `bfcl/<category>`, so that the easy
`irrelevance`, won by calling nothing, does not make declining look better than calling in the other
categories. With `group_size` k > 1 a user answers one case k times at once, one session each, in a group of
its own (`bfcl/<case id>/<seed>-<user>-<round>`, as GRPO samples a prompt): an answer is then weighed
against the same case's other answers, not against other cases of its category.
"""

import random
import threading
import time

from workers.envs.bfcl.agent import reward_bodies, run_case, score_run
from workers.envs.bfcl.cases import Case, load_cases
from workers.envs.traffic import TrafficStats, UserThreads


class BfclTraffic(UserThreads):
    thread_name = "bfcl-user"

    def __init__(
        self,
        *,
        gateway_url: str,
        api_key: str,
        model: str,
        categories: tuple[str, ...],
        users: int = 2,
        seed: int = 0,
        max_tokens: int = 160,
        temperature: float = 1.0,
        group_size: int = 1,
    ):
        if group_size < 1:
            raise ValueError("group_size must be at least 1")
        self.gateway_url, self.api_key, self.model = gateway_url.rstrip("/"), api_key, model
        self.users, self.seed = users, seed
        self.max_tokens, self.temperature = max_tokens, temperature
        self.group_size = group_size
        self.cases: list[Case] = [
            case
            for category in categories
            for case in load_cases(category, split="train")
            if not case.multi_turn
        ]
        if not self.cases:
            raise ValueError("no single-turn train case in the categories asked for")
        self.stats = TrafficStats()
        self.outcomes: dict = {}  # the annotator's ground truth in the weather demo; none here
        self.by_category: dict[str, list[int]] = {}  # category → [cases, right]
        # the answers the checker accepted (reward 1): {"case_id", "content", "calls": [[name, arguments]]}
        self.accepted: list[dict] = []
        super().__init__()

    def _user(self, number: int) -> None:
        import httpx

        rng = random.Random(f"bfcl-user:{self.seed}:{number}")
        http = httpx.Client(base_url=self.gateway_url, timeout=300)
        rounds = 0
        while not self._stop.is_set():
            case = rng.choice(self.cases)
            if self.group_size == 1:
                self._session(http, case, f"bfcl/{case.category}")
                continue
            # a group of one case's answers: the GRPO baseline is the case's own mean reward. Every session
            # of the group starts before any answer is sent, so that while one answer is still undecided
            # the group's other sessions are on record (a learner that takes whole groups waits for it)
            group_id = f"bfcl/{case.case_id}/{self.seed}-{number}-{rounds}"
            rounds += 1
            sessions = []
            for _ in range(self.group_size):
                session = self._start(http, case, group_id)
                if session is None:
                    break
                sessions.append(session)
            members = [
                threading.Thread(target=self._play, args=(http, case, session), daemon=True)
                for session in sessions
            ]
            for member in members:
                member.start()
            for member in members:
                member.join()
        http.close()

    def _session(self, http, case: Case, group_id: str) -> None:
        """One RL session: start (waiting out the run's back-pressure), the case, its reward, the end."""
        session = self._start(http, case, group_id)
        if session is not None:
            self._play(http, case, session)

    def _start(self, http, case: Case, group_id: str) -> dict | None:
        """POST /rl/start_session, waiting out the run's back-pressure (429); None when the traffic stops or
        the start failed (counted)."""
        import httpx

        headers = {"Authorization": f"Bearer {self.api_key}"}
        try:
            while True:
                started = http.post(
                    "/rl/start_session", json={"task_id": case.case_id, "group_id": group_id}, headers=headers
                )
                if started.status_code != 429:
                    break
                with self.stats.lock:
                    self.stats.held_back += 1
                if self._stop.wait(float(started.headers.get("retry-after", "1"))):
                    return None
            started.raise_for_status()
            return started.json()
        except (httpx.HTTPError, ValueError) as problem:
            self._failed(problem)
            return None

    def _play(self, http, case: Case, session: dict) -> None:
        """The case in a started session, its reward, the session's end."""
        import httpx
        import openai

        headers = {"Authorization": f"Bearer {self.api_key}"}
        try:
            client = openai.OpenAI(
                base_url=f"{self.gateway_url}/v1", api_key=session["api_key"], max_retries=2, timeout=300
            )
            try:
                ran = run_case(
                    client,
                    model=self.model,
                    case=case,
                    session_id=session["session_id"],
                    max_tokens=self.max_tokens,
                    temperature=self.temperature,
                )
            finally:
                client.close()
            verdict = score_run(ran)
            for body in reward_bodies(ran, verdict):
                answer = http.post("/v1/rewards", headers=headers, json=body)
                if answer.status_code >= 400:
                    with self.stats.lock:
                        self.stats.rejected_rewards += 1
                        self.stats.last_problem = f"environment reward: {answer.text[:200]}"
            http.post("/rl/end_session", json={}, headers={"Authorization": f"Bearer {session['api_key']}"})
            self._count(case, ran, verdict)
        except (httpx.HTTPError, KeyError, ValueError) as problem:
            self._failed(problem)

    def _failed(self, problem: Exception) -> None:
        with self.stats.lock:
            self.stats.errors += 1
            self.stats.last_problem = f"{type(problem).__name__}: {problem}"[:200]
        self._stop.wait(1.0)

    def _count(self, case: Case, ran, verdict) -> None:
        with self.stats.lock:
            if ran.error is not None:
                self.stats.errors += 1
                self.stats.last_problem = ran.error[:200]
                return
            right = verdict.valid
            self.stats.episodes += 1
            self.stats.successes += right
            self.stats.recent.append((right, verdict.value))
            self.stats.history.append((time.time(), right))
            tally = self.by_category.setdefault(case.category, [0, 0])
            tally[0] += 1
            tally[1] += int(right)
            if right and ran.steps:
                step = ran.steps[0]
                self.accepted.append(
                    {
                        "case_id": case.case_id,
                        "category": case.category,
                        "content": step.content,
                        "calls": [[call.name, call.arguments] for call in step.calls],
                    }
                )
