"""Running an LLM-judge evaluator over one trajectory (the task rewards.run_judge): the rubric rendered from
the trajectory's outcome, the judge called THROUGH THE GATEWAY, its answer parsed (workers.rewards.judge), and
the verdict appended as an evaluator reward whose evidence names the judge's step.

The judge's call is ordinary tenant traffic: the worker mints a session key for the evaluator's tenant (scope
`inference`, key prefix `judge`, forgotten after the call, as evaluation runs do), sends `X-Areal-Purpose:
eval`, and reaches the gateway at AREAL_GATEWAY_URL, so the call is authorized, rate-limited, budgeted and
recorded (never trained on) like any other. The session `judge-<evaluator id>-<trajectory id>` is pinned to
the configured version first: a registry version through the release routing's session pin, otherwise the
tenant's backends serving the model at that version through the backend router's session affinity.

Every run leaves an EvaluatorRun: claimed by a conditional update (so two workers never judge the same
pair at once), then succeeded with its reward, or failed with a code, the reason and, when the answer could
not be parsed, the raw answer cut short. Nothing is stored as a score unless the judge gave it."""

import logging
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

import httpx
from django.conf import settings

from apps.core.errors import DomainError
from apps.rewards.choices import EvaluatorRunStatus
from apps.rewards.selectors import dangerously_llm_judge_with_tenant, judge_target, trajectory_outcome
from apps.rewards.services import (
    evaluator_reward_existing,
    evaluator_reward_store,
    evaluator_run_attempts_add,
    evaluator_run_claim,
    evaluator_run_finish,
    evaluator_run_session_set,
)
from apps.trajectories.choices import Purpose
from apps.trajectories.selectors import dangerously_trajectory_with_tenant
from workers.rewards.judge import (
    JudgeConfig,
    JudgeConfigInvalid,
    UnparseableAnswer,
    judge_config,
    judge_messages,
    parse_verdict,
    truncated,
)

if TYPE_CHECKING:
    from apps.rewards.models import Evaluator, EvaluatorRun
    from apps.trajectories.models import Trajectory

RETRYABLE_STATUSES = {429, 500, 502, 503, 504}
MAX_RETRY_AFTER_SECONDS = 30.0
ERROR_CHARS = 1000

logger = logging.getLogger(__name__)


class JudgeFailed(Exception):
    """The run cannot give a verdict: `code` is stored on the run with the message (and `raw`, the answer)."""

    def __init__(
        self, code: str, message: str, *, raw: str = "", step_id: str | None = None, attempts: int = 0
    ):
        super().__init__(message)
        self.code, self.message, self.raw, self.step_id = code, message, raw, step_id
        self.attempts = attempts  # judge calls made


@dataclass(frozen=True)
class JudgeAnswer:
    text: str
    step_id: str | None
    finish_reason: str
    attempts: int


def judge_session_id(*, evaluator: "Evaluator", trajectory_id) -> str:
    return f"judge-{evaluator.pk}-{trajectory_id}"


def _pin(*, tenant, config: JudgeConfig, session_id: str) -> None:
    """Pins the judge's session to its configured version before the call, so the gateway serves that
    version and no other (or refuses)."""
    from apps.inference.services import NoBackendAvailable, backend_for_session
    from apps.releases.routing_writes import session_pin

    target, problems = judge_target(tenant=tenant, model=config.model, version=config.version)
    if target is None:
        raise JudgeFailed("judge_not_routable", "; ".join(problems.values()))
    if target.model_version is not None:
        session_pin(tenant=tenant, version=target.model_version, session_id=session_id)
        return
    try:
        backend_for_session(
            tenant=tenant, served_model=config.model, session_id=session_id, model_version=config.version
        )
    except NoBackendAvailable as error:
        raise JudgeFailed("judge_unavailable", error.message) from None


def _retry_after(response: httpx.Response, backoff: float) -> float:
    try:
        return min(float(response.headers.get("retry-after", "")), MAX_RETRY_AFTER_SECONDS)
    except ValueError:
        return backoff


def _gateway_error(response: httpx.Response) -> str:
    try:
        error = response.json()["error"]
        return f"the gateway answered {response.status_code} {error.get('code')}: {error.get('message')}"
    except (ValueError, KeyError, TypeError, AttributeError):
        return f"the gateway answered {response.status_code}"


def _judge_post(client: httpx.Client, *, principal, session_id: str, body: dict) -> httpx.Response:
    """One POST with a session key of its own, minted for it and forgotten after it. Raises httpx.HTTPError,
    or SharedStateUnavailable when the key cannot be recorded."""
    from apps.gateway.principals import session_key_forget, session_key_mint

    key = session_key_mint(principal=principal, session_id=session_id, task_id="", group_id="")
    headers = {"Authorization": f"Bearer {key}", "X-Areal-Purpose": "eval", "X-Agent-Name": "areal-judge"}
    try:
        return client.post("/v1/chat/completions", json=body, headers=headers)
    finally:
        session_key_forget(key)


def judge_call(
    *, tenant, config: JudgeConfig, session_id: str, messages: list[dict], sleep=time.sleep
) -> JudgeAnswer:
    """One chat completion from the judge through the gateway, with `config.retries` more tries after a
    transport error, a timeout, a 429/5xx answer or a session key that could not be recorded (waiting
    `retry_backoff_s` doubled each time, or the gateway's Retry-After); any other refusal (403 model not
    allowed, 404, 422 ...) is not retried. Raises JudgeFailed (`judge_call_failed`, or `judge_unavailable`
    once the retries are spent)."""
    from apps.core.shared_state import SharedStateUnavailable
    from apps.gateway.principals import Principal

    body = {
        "model": config.model,
        "messages": messages,
        "temperature": 0,
        "max_tokens": config.max_tokens,
    }
    principal = Principal(
        tenant_id=tenant.pk, tenant_slug=tenant.slug, key_prefix="judge", scopes=("inference",)
    )
    backoff, problem = config.retry_backoff_s, ""
    with httpx.Client(base_url=settings.AREAL_GATEWAY_URL.rstrip("/"), timeout=config.timeout_s) as client:
        for attempt in range(1, config.retries + 2):
            wait = backoff
            try:
                response = _judge_post(client, principal=principal, session_id=session_id, body=body)
            except httpx.HTTPError as error:
                problem = f"the gateway could not be reached: {type(error).__name__}"
            except SharedStateUnavailable as error:
                problem = f"the judge's session key could not be recorded: {error}"
            else:
                if response.status_code == 200:
                    return _answer(response, attempt)
                problem = _gateway_error(response)
                if response.status_code not in RETRYABLE_STATUSES:
                    raise JudgeFailed(
                        "judge_call_failed", truncated(problem, ERROR_CHARS), attempts=attempt
                    ) from None
                wait = _retry_after(response, backoff)
            if attempt <= config.retries:
                sleep(min(wait, MAX_RETRY_AFTER_SECONDS))
                backoff *= 2
    raise JudgeFailed(
        "judge_unavailable",
        truncated(f"{problem} (after {config.retries + 1} tries)", ERROR_CHARS),
        attempts=config.retries + 1,
    )


def _answer(response: httpx.Response, attempts: int) -> JudgeAnswer:
    try:
        payload = response.json()
        choice = payload["choices"][0]
        text = choice["message"].get("content") or ""
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        raise JudgeFailed(
            "judge_call_failed", "the gateway's answer is not a chat completion", attempts=attempts
        ) from None
    step_id = payload.get("id")
    try:
        step_id = str(uuid.UUID(str(step_id)))
    except ValueError:
        step_id = None
    return JudgeAnswer(
        text=text if isinstance(text, str) else str(text),
        step_id=step_id,
        finish_reason=str(choice.get("finish_reason") or ""),
        attempts=attempts,
    )


def _stale_after(evaluator: "Evaluator") -> timedelta:
    """How long a running claim may last before another worker takes it over: every try at its timeout and
    backoff, and a minute more."""
    try:
        config = judge_config(evaluator.config)
    except JudgeConfigInvalid:
        return timedelta(minutes=1)  # it fails at once
    tries = config.retries + 1
    per_try = config.timeout_s + min(config.retry_backoff_s * 2**tries, MAX_RETRY_AFTER_SECONDS)
    return timedelta(seconds=tries * per_try + 60)


def _claim(*, evaluator: "Evaluator", trajectory: "Trajectory") -> tuple["EvaluatorRun", bool]:
    """(the pair's run, whether this worker now holds it): `services.evaluator_run_claim`, a run running past
    `_stale_after` (a killed worker's) taken over."""
    return evaluator_run_claim(
        evaluator=evaluator, trajectory=trajectory, stale_after=_stale_after(evaluator)
    )


def _finish(run: "EvaluatorRun", **fields) -> "EvaluatorRun":
    return evaluator_run_finish(run=run, **fields)


def _fail(run: "EvaluatorRun", failure: JudgeFailed) -> "EvaluatorRun":
    return _finish(
        run,
        status=EvaluatorRunStatus.FAILED,
        error_code=failure.code,
        # PostgreSQL's text cannot hold NUL, which a small judge model can generate (the step keeps U+FFFD too).
        error=truncated(failure.message, ERROR_CHARS).replace("\x00", "\ufffd"),
        raw_answer=failure.raw.replace("\x00", "\ufffd"),
        judge_step_id=failure.step_id,
    )


def judge_run(*, evaluator_id: int, trajectory_id: str, sleep=time.sleep) -> "EvaluatorRun | None":
    """Judges one trajectory with one llm_judge evaluator of the same tenant (anything else: None). Skips
    the gateway's eval traffic (the judge's own sessions among it, which would otherwise be judged in turn).
    Idempotent per (evaluator version, trajectory): a succeeded run, or one another worker holds, is returned
    as it is; a failed one is run again. Stores one reward (`services.evaluator_reward_store`, evidence: the
    judge's step id, session, model, version, reason) or records why not; enqueues the trajectory's
    qualification when a reward is stored."""
    evaluator = dangerously_llm_judge_with_tenant(evaluator_id)
    trajectory = dangerously_trajectory_with_tenant(trajectory_id)
    if evaluator is None or trajectory is None or trajectory.tenant_id != evaluator.tenant_id:
        return None
    if trajectory.purpose == Purpose.EVAL:
        return None
    run, held = _claim(evaluator=evaluator, trajectory=trajectory)
    if not held:
        return run
    existing = evaluator_reward_existing(evaluator=evaluator, trajectory_id=trajectory.pk)
    if existing is not None:  # stored by a run that died before it could say so
        return _finish(run, status=EvaluatorRunStatus.SUCCEEDED, reward=existing, error_code="", error="")
    session_id = judge_session_id(evaluator=evaluator, trajectory_id=trajectory.pk)
    evaluator_run_session_set(run=run, session_id=session_id)
    try:
        reward, answer = _judge(evaluator, trajectory, session_id, run, sleep)
    except JudgeFailed as failure:
        return _fail(run, failure)
    except Exception as error:  # a bug or a lost database: the run must not look held until it goes stale
        _fail(run, JudgeFailed("internal_error", f"the run failed: {type(error).__name__}"))
        raise
    return _finish(
        run,
        status=EvaluatorRunStatus.SUCCEEDED,
        reward=reward,
        judge_step_id=answer.step_id,
        error_code="",
        error="",
        raw_answer="",
    )


def _judge(evaluator: "Evaluator", trajectory: "Trajectory", session_id: str, run: "EvaluatorRun", sleep):
    try:
        config = judge_config(evaluator.config)
        messages = judge_messages(config, trajectory_outcome(trajectory=trajectory))
    except JudgeConfigInvalid as error:
        raise JudgeFailed("config_invalid", str(error)) from None
    _pin(tenant=evaluator.tenant, config=config, session_id=session_id)
    try:
        answer = judge_call(
            tenant=evaluator.tenant, config=config, session_id=session_id, messages=messages, sleep=sleep
        )
    except JudgeFailed as failure:
        evaluator_run_attempts_add(run=run, attempts=failure.attempts)
        raise
    evaluator_run_attempts_add(run=run, attempts=answer.attempts)
    try:
        verdict = parse_verdict(answer.text, config)
    except UnparseableAnswer as error:
        reason = error.reason
        if answer.finish_reason == "length":
            reason += f" (the answer was cut at max_tokens={config.max_tokens})"
        raise JudgeFailed("answer_unparseable", reason, raw=error.raw, step_id=answer.step_id) from None
    evidence = {
        "judge_step_id": answer.step_id,
        "judge_session_id": session_id,
        "model": config.model,
        "version": config.version,
        "score": verdict.score,
        "verdict": verdict.verdict,
        "clamped": verdict.clamped,
        "reason": verdict.reason,
    }
    try:
        reward = evaluator_reward_store(
            evaluator=evaluator,
            trajectory=trajectory,
            value=verdict.value,
            kind=None if verdict.kind == "numeric" else verdict.kind,
            label=verdict.label,
            evidence=evidence,
        )
    except DomainError as error:  # out of the reward spec (422), past the late-reward window (410)
        raise JudgeFailed(
            error.code, error.message, raw=truncated(answer.text, 2000), step_id=answer.step_id
        ) from None
    return reward, answer


def judge_evaluator_run(*, trajectory_id: str, evaluator_id: int) -> dict:
    """Runs one llm_judge evaluator over one trajectory (judge_run) and says how it went."""
    run = judge_run(evaluator_id=evaluator_id, trajectory_id=trajectory_id)
    if run is None:
        return {"trajectory_id": trajectory_id, "evaluator_id": evaluator_id, "skipped": True}
    if run.status == "failed":
        logger.warning("judge %s failed on trajectory %s: %s", evaluator_id, trajectory_id, run.error)
    return {
        "trajectory_id": trajectory_id,
        "evaluator_id": evaluator_id,
        "status": run.status,
        "reward_id": str(run.reward_id) if run.reward_id else None,
        "error_code": run.error_code,
    }
