"""Qualification gates. Each gate is a pure function of a trajectory's facts and the tenant's limits;
its code is stable (programs and the console filter by it). A trajectory qualifies when every gate
passes; otherwise the verdict lists the failing codes, in gate order."""

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class StepFacts:
    step_id: str
    kind: str = "llm_call"
    retry_of: str | None = None
    aborted: bool = False
    pii_redacted: bool = False
    has_tokens: bool = True  # prompt and completion ids stored
    tokens_consistent: bool = True  # logprobs and versions as long as the completion ids
    retokenized: bool = False


@dataclass(frozen=True)
class TrajectoryFacts:
    status: str = "complete"
    purpose: str = "production"
    consent: str = "full"
    training_use: bool = True
    training_reward: float | None = 1.0
    review_status: str = "unreviewed"
    review_required: bool = False
    total_tokens: int = 0
    steps: tuple[StepFacts, ...] = field(default_factory=lambda: (StepFacts(step_id="s0"),))
    is_duplicate: bool = False


@dataclass(frozen=True)
class Limits:
    min_steps: int = 1
    max_steps: int = 256
    max_tokens: int = 262_144


@dataclass(frozen=True)
class Verdict:
    status: str  # qualified or disqualified
    reasons: tuple[str, ...]


def trajectory_complete(facts: TrajectoryFacts, limits: Limits) -> bool:
    return facts.status == "complete"


def has_training_reward(facts: TrajectoryFacts, limits: Limits) -> bool:
    return facts.training_reward is not None


def consent_allows_training(facts: TrajectoryFacts, limits: Limits) -> bool:
    return facts.consent == "full" and facts.training_use


def pii_policy_satisfied(facts: TrajectoryFacts, limits: Limits) -> bool:
    """A redacted step's original token ids still encode what was redacted: they may only reach training
    re-tokenized from the redacted text."""
    return not any(step.pii_redacted and step.has_tokens and not step.retokenized for step in facts.steps)


def token_data_complete(facts: TrajectoryFacts, limits: Limits) -> bool:
    """Every finished model call carries consistent token ids and logprobs (a redacted step whose ids were
    dropped leaves a hole), and there is at least one."""
    calls = [step for step in facts.steps if step.kind == "llm_call" and not step.aborted]
    return bool(calls) and all(step.has_tokens and step.tokens_consistent for step in calls)


def not_retry_orphan(facts: TrajectoryFacts, limits: Limits) -> bool:
    """Not a stray attempt: no step retries a step this trajectory lacks, and it does not end on an
    aborted model call (the turn was abandoned; its retry, if any, lives elsewhere)."""
    known = {step.step_id for step in facts.steps}
    if any(step.retry_of and step.retry_of not in known for step in facts.steps):
        return False
    calls = [step for step in facts.steps if step.kind == "llm_call"]
    return not (calls and calls[-1].aborted)


def purpose_production(facts: TrajectoryFacts, limits: Limits) -> bool:
    return facts.purpose == "production"


def reviewed_if_required(facts: TrajectoryFacts, limits: Limits) -> bool:
    """Approved where the tenant requires review; a rejection or a request for changes holds anywhere."""
    if facts.review_status in ("rejected", "needs_changes"):
        return False
    return not facts.review_required or facts.review_status == "approved"


def within_length_limits(facts: TrajectoryFacts, limits: Limits) -> bool:
    return (
        limits.min_steps <= len(facts.steps) <= limits.max_steps and facts.total_tokens <= limits.max_tokens
    )


def not_duplicate(facts: TrajectoryFacts, limits: Limits) -> bool:
    return not facts.is_duplicate


GATES: tuple[tuple[str, Callable[[TrajectoryFacts, Limits], bool]], ...] = (
    ("trajectory_complete", trajectory_complete),
    ("has_training_reward", has_training_reward),
    ("consent_allows_training", consent_allows_training),
    ("pii_policy_satisfied", pii_policy_satisfied),
    ("token_data_complete", token_data_complete),
    ("not_retry_orphan", not_retry_orphan),
    ("purpose_production", purpose_production),
    ("reviewed_if_required", reviewed_if_required),
    ("within_length_limits", within_length_limits),
    ("not_duplicate", not_duplicate),
)
GATE_CODES = tuple(code for code, _ in GATES)
OVERRIDE_CODE = "operator_override"


def evaluate(facts: TrajectoryFacts, limits: Limits) -> Verdict:
    reasons = tuple(code for code, gate in GATES if not gate(facts, limits))
    return Verdict(status="disqualified" if reasons else "qualified", reasons=reasons)


def content_hash(steps: list[dict]) -> str:
    """SHA-256 of what was said and done (each step's kind, messages and action), ignoring ids, times and
    costs: two sessions that replay the same exchange hash alike."""
    canonical = [
        [step.get("kind"), (step.get("observation") or {}).get("messages"), step.get("action") or {}]
        for step in steps
    ]
    return hashlib.sha256(
        json.dumps(canonical, sort_keys=True, separators=(",", ":"), default=str).encode()
    ).hexdigest()
