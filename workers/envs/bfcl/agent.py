"""An unmodified BFCL agent on the official openai SDK: only a base URL and a key point it at areal-web.

`run_case(client, ...)` runs one case: a single-turn case is one chat completion with the case's functions
as tools (BFCL checks the first reply's calls; nothing is executed); a multi-turn case goes turn by turn, the
user's messages of each turn appended to one conversation, the model's calls executed locally against the
case's simulated APIs (executor.py) and their results sent back as tool messages until it answers without a
call (a turn ends) or uses up `max_steps_per_turn` (the case ends, unfinished). Every request of a case
carries the same `X-Session-Id` (and `X-Task-Id`: the case id), so the gateway records the case as one
trajectory.

`BfclAgent` adds what a customer's own evaluator would do around it: it scores the run with BFCL's checker
(scoring.py) and posts the result through the public reward API (`POST /v1/rewards`, source
`environment`): per trajectory for single-turn cases (by session id), per step for multi-turn ones (each
completion by its interaction id, valued with its turn's verdict). A run the agent could not complete
(transport error, refusal) is reported with its error, scored as failed and not rewarded: the checker did not
judge it. It then ends the session (`POST /rl/end_session` with the session id). No HTTP failure raises.
"""

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from workers.envs.bfcl.calls import ToolCall
from workers.envs.bfcl.cases import Case
from workers.envs.bfcl.executor import LocalExecutor
from workers.envs.bfcl.scoring import Score, score
from workers.envs.bfcl.tools import openai_tools, turn_messages

REWARD_SOURCE = "environment"


@dataclass(frozen=True)
class Step:
    """One completion: the turn it belongs to, the gateway's step id, and what the model said and called."""

    turn: int
    completion_id: str
    content: str
    calls: tuple[ToolCall, ...]


@dataclass(frozen=True)
class CaseRun:
    case: Case
    session_id: str
    transcript: tuple[dict, ...]
    steps: tuple[Step, ...]
    finished_turns: int  # turns the model closed with an answer (single-turn: 1 once it replied)
    error: str | None = None

    def answer(self):
        """What the scorer takes: the reply's calls (single-turn), or each finished turn's steps' calls."""
        if not self.case.multi_turn:
            return list(self.steps[0].calls) if self.steps else []
        turns: list[list[list[ToolCall]]] = [[] for _ in range(self.finished_turns)]
        for step in self.steps:
            if step.turn < self.finished_turns:
                turns[step.turn].append(list(step.calls))
        return turns


@dataclass(frozen=True)
class Posted:
    """One POST to the gateway (a reward, the session end) and its answer."""

    body: dict
    status: int | None  # the HTTP status, None when the request did not get an answer
    reward_id: str | None = None
    problem: str | None = None


@dataclass(frozen=True)
class CaseResult:
    run: CaseRun
    score: Score
    rewards: tuple[Posted, ...] = ()
    ended: bool = False
    problems: tuple[str, ...] = field(default=())


def run_case(
    client,
    *,
    model: str,
    case: Case,
    session_id: str,
    max_tokens: int = 256,
    temperature: float = 1.0,
    max_steps_per_turn: int = 5,
    extra_headers: dict | None = None,
) -> CaseRun:
    """`client` is an `openai.OpenAI`. Transport errors and refusals end the run (recorded in `error`)."""
    import openai

    headers = {"X-Session-Id": session_id, "X-Task-Id": case.case_id, **(extra_headers or {})}
    tools = openai_tools(case)
    messages: list[dict] = []
    steps: list[Step] = []
    finished = 0
    error = None
    executor = LocalExecutor(case) if case.multi_turn else None
    try:
        for turn in range(len(case.turns)):
            messages.extend(turn_messages(case, turn))
            for _ in range(max_steps_per_turn if executor else 1):
                try:
                    reply = client.chat.completions.create(
                        model=model,
                        messages=messages,
                        tools=tools,
                        max_tokens=max_tokens,
                        temperature=temperature,
                        extra_headers=headers,
                    )
                except openai.OpenAIError as problem:
                    error = f"{type(problem).__name__}: {problem}"
                    break
                if not reply.choices:
                    error = "the reply had no choices"
                    break
                message = reply.choices[0].message
                wire_calls = [call for call in message.tool_calls or [] if getattr(call, "function", None)]
                calls = tuple(ToolCall(call.function.name, call.function.arguments) for call in wire_calls)
                steps.append(
                    Step(turn=turn, completion_id=reply.id, content=message.content or "", calls=calls)
                )
                messages.append(
                    {
                        "role": "assistant",
                        "content": message.content or "",
                        **(
                            {
                                "tool_calls": [
                                    {
                                        "id": call.id,
                                        "type": "function",
                                        "function": {
                                            "name": call.function.name,
                                            "arguments": call.function.arguments,
                                        },
                                    }
                                    for call in wire_calls
                                ]
                            }
                            if wire_calls
                            else {}
                        ),
                    }
                )
                if executor is None or not calls:
                    finished = turn + 1
                    break
                for call, result in zip(wire_calls, executor.execute(calls), strict=True):
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
            if error is not None or finished != turn + 1:
                break  # a transport error, or the step limit: the case ends unfinished
    finally:
        if executor is not None:
            executor.close()
    return CaseRun(
        case=case,
        session_id=session_id,
        transcript=tuple(messages),
        steps=tuple(steps),
        finished_turns=finished,
        error=error,
    )


def score_run(run: CaseRun) -> Score:
    """BFCL's verdict on a completed run; a run that ended in an error is failed, with that error."""
    if run.error is not None:
        turns = (False,) * len(run.case.turns) if run.case.multi_turn else ()
        return Score(False, f"not completed: {run.error}"[:2000], "agent_error", turns=turns)
    return score(run.case, run.answer())


def reward_bodies(run: CaseRun, verdict: Score) -> list[dict]:
    """The `/v1/rewards` bodies of a scored run: one for the trajectory (single-turn), one per step
    (multi-turn). None for a run that did not complete."""
    if run.error is not None:
        return []
    common = {"kind": "numeric", "source": REWARD_SOURCE}
    if not run.case.multi_turn:
        return [
            {
                **common,
                "session_id": run.session_id,
                "value": verdict.value,
                "idempotency_key": f"bfcl:{run.session_id}",
                "comment": f"BFCL {run.case.case_id}: {verdict.reason}"[:2000],
            }
        ]
    bodies = []
    for step in run.steps:
        right = step.turn < len(verdict.turns) and verdict.turns[step.turn]
        bodies.append(
            {
                **common,
                "interaction_id": step.completion_id,
                "value": 1.0 if right else 0.0,
                "idempotency_key": f"bfcl:{step.completion_id}",
                "comment": f"BFCL {run.case.case_id} turn {step.turn}: "
                + ("right through this turn" if right else verdict.reason)[:2000],
            }
        )
    return bodies


class BfclAgent:
    """Runs cases through an OpenAI-compatible base URL (the gateway) with one key, which needs the scopes
    `inference` and `rewards:write`."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        model: str,
        max_tokens: int = 256,
        temperature: float = 1.0,
        max_steps_per_turn: int = 5,
        extra_headers: dict | None = None,
        timeout: float = 120.0,
    ):
        import httpx
        import openai

        self.base_url = base_url.rstrip("/")
        self.model = model
        self.max_tokens, self.temperature = max_tokens, temperature
        self.max_steps_per_turn, self.extra_headers = max_steps_per_turn, extra_headers
        self.client = openai.OpenAI(
            base_url=f"{self.base_url}/v1", api_key=api_key, max_retries=2, timeout=timeout
        )
        self.http = httpx.Client(
            base_url=self.base_url, headers={"Authorization": f"Bearer {api_key}"}, timeout=timeout
        )

    def run(self, case: Case) -> CaseResult:
        session_id = f"bfcl-{case.case_id}-{uuid.uuid4().hex[:12]}"
        run = run_case(
            self.client,
            model=self.model,
            case=case,
            session_id=session_id,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            max_steps_per_turn=self.max_steps_per_turn,
            extra_headers=self.extra_headers,
        )
        verdict = score_run(run)
        rewards = tuple(self._post("/v1/rewards", body) for body in reward_bodies(run, verdict))
        ended = self._post("/rl/end_session", {"session_id": session_id}) if run.steps else None
        problems = tuple(
            f"{posted.body.get('session_id') or posted.body.get('interaction_id')}: {posted.problem}"
            for posted in rewards + ((ended,) if ended else ())
            if posted.problem
        )
        return CaseResult(
            run=run,
            score=verdict,
            rewards=rewards,
            ended=bool(ended and ended.status == 200),
            problems=problems,
        )

    def run_cases(self, cases: Iterable[Case]) -> list[CaseResult]:
        return [self.run(case) for case in cases]

    def _post(self, path: str, body: dict) -> Posted:
        import httpx

        try:
            answer = self.http.post(path, json=body)
        except httpx.HTTPError as error:
            return Posted(body=body, status=None, problem=f"{type(error).__name__}: {error}")
        if answer.status_code >= 400:
            return Posted(body=body, status=answer.status_code, problem=answer.text[:500])
        try:
            reward_id = answer.json().get("reward_id")
        except ValueError:
            reward_id = None
        return Posted(body=body, status=answer.status_code, reward_id=reward_id)

    def close(self) -> None:
        self.client.close()
        self.http.close()

    def __enter__(self) -> "BfclAgent":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
