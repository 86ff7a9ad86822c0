"""The control plane's tick: signals → the state snapshot → the rules → decisions → actions → follow-up.

One tick of one policy runs in one transaction that first locks the policy row (PostgreSQL: a second tick
of the same policy waits for the first and then finds its decisions open; SQLite: the database's write lock,
taken at BEGIN, serializes them), so ticking twice at once records nothing twice. Each action runs in a
savepoint of its own: an unexpected error fails that decision, not the tick.
"""

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from django.db import transaction
from django.utils import timezone

from apps.evolution.choices import DecisionKind, DecisionStatus, PolicyMode
from apps.evolution.decisions import (
    decision_finish,
    decision_follow_release,
    decision_record,
    decisions_expire,
)
from apps.evolution.policies import policy_lock, policy_lock_enabled, policy_tick_mark
from apps.evolution.selectors import (
    control_state,
    dangerously_policies_to_tick,
    decision_status_in,
    decision_timeline,
    decisions_in_status,
)
from apps.loop.actions import decision_execute, decision_follow, policy_actor
from apps.tenants.models import Tenant
from apps.tenants.selectors import tenant_get
from workers.evolution.rules import PolicyView, decide

if TYPE_CHECKING:
    from apps.evolution.models import Decision, EvolutionPolicy

logger = logging.getLogger(__name__)
UNDER_WAY = (DecisionStatus.APPROVED, DecisionStatus.RUNNING)


@dataclass
class TickResult:
    signals: dict = field(default_factory=dict)
    recorded: list = field(default_factory=list)  # decisions this tick recorded
    executed: list = field(default_factory=list)  # approved decisions it started
    followed: list = field(default_factory=list)  # running decisions it looked at
    expired: int = 0


def policy_view(policy: "EvolutionPolicy") -> PolicyView:
    return PolicyView(
        mode=policy.mode,
        signals=dict(policy.signals or {}),
        update_kinds=tuple(policy.update_kinds or ()),
        evaluate_every=int((policy.recipe or {}).get("evaluate_every", 2)),
        cooldown_seconds=float(policy.cooldown_seconds),
        compute_budget_seconds=float(policy.compute_budget_seconds),
        window_seconds=float(policy.window_seconds),
    )


def _signals(*, tenant: Tenant, policy: "EvolutionPolicy", now) -> dict:
    from apps.evolution.signals import signals_compute

    try:
        return signals_compute(tenant=tenant, policy=policy, now=now)
    except NotImplementedError:  # the signals are not built in this installation yet: the rest still runs
        return {}


def evolution_tick(
    *, tenant: Tenant, policy: "EvolutionPolicy", signals: dict | None = None, now=None
) -> TickResult:
    """One tick of `policy` (see the module's docstring). `signals` given: used as they are, instead of
    computing them (a caller that measured them already, or a test)."""
    now = now or timezone.now()
    with transaction.atomic():
        policy = policy_lock(tenant=tenant, policy_id=policy.pk)
        result = TickResult(expired=decisions_expire(tenant=tenant, policy=policy, now=now))
        result.signals = signals if signals is not None else _signals(tenant=tenant, policy=policy, now=now)
        policy_tick_mark(policy_id=policy.pk, at=now)
        if policy.mode == PolicyMode.OBSERVE or not policy.enabled:
            return result
        _close_superseded(tenant=tenant, policy=policy)
        state = control_state(tenant=tenant, policy=policy, now=now)
        for proposal in decide(result.signals, policy_view(policy), state):
            decision = _record(tenant=tenant, policy=policy, proposal=proposal)
            if decision is not None:
                result.recorded.append(decision)
        for decision in list(
            decisions_in_status(tenant=tenant, policy=policy, status=DecisionStatus.RUNNING)
        ):
            result.followed.append(_guarded(decision_follow, tenant=tenant, decision=decision))
        for decision in list(
            decisions_in_status(tenant=tenant, policy=policy, status=DecisionStatus.APPROVED)
        ):
            result.executed.append(_guarded(decision_execute, tenant=tenant, decision=decision))
    return result


def _close_superseded(*, tenant: Tenant, policy: "EvolutionPolicy") -> None:
    """A promotion or rollback still waiting while its release already ended (a person promoted or rolled it
    back in the releases console, or its guardrails did) has nothing left to do: it is closed the way its
    release went (`decisions.decision_follow_release`; apps.releases' `release_finished` does it at once, the
    tick catches what that left open)."""
    waiting = decision_timeline(tenant=tenant, policy=policy).filter(
        kind__in=(DecisionKind.PROMOTE, DecisionKind.ROLLBACK),
        status__in=(DecisionStatus.PROPOSED, DecisionStatus.APPROVED),
    )
    for release_id in {decision.evidence.get("release") for decision in waiting} - {None, ""}:
        decision_follow_release(tenant=tenant, release_id=release_id)


def _record(*, tenant: Tenant, policy: "EvolutionPolicy", proposal) -> "Decision | None":
    if proposal.kind == DecisionKind.NOTHING:
        last = decision_timeline(tenant=tenant, policy=policy).order_by("-id").first()
        held_back_by = proposal.evidence.get("held_back_by")
        if (
            last is not None
            and last.kind == DecisionKind.NOTHING
            and last.evidence.get("held_back_by") == held_back_by
        ):
            return None  # said already; not again every tick
    version = None
    if proposal.version is not None:
        from apps.training.selectors import model_version_by_number

        version = model_version_by_number(tenant=tenant, name=policy.model, number=proposal.version)
    return decision_record(
        tenant=tenant,
        policy=policy,
        kind=proposal.kind,
        reason=proposal.reason,
        evidence=proposal.evidence,
        actor=policy_actor(policy),
        version=version,
        status=DecisionStatus.SUCCEEDED if proposal.kind == DecisionKind.NOTHING or proposal.done else None,
    )


def _guarded(action, *, tenant: Tenant, decision: "Decision") -> "Decision":
    """Runs an action in a savepoint; an unexpected error fails the decision with it (and is logged)."""
    try:
        with transaction.atomic():
            return action(tenant=tenant, decision=decision)
    except Exception as error:
        logger.exception("evolution decision %s (%s) failed", decision.pk, decision.kind)
        if not decision_status_in(tenant=tenant, decision_id=decision.pk, statuses=UNDER_WAY):
            return decision
        return decision_finish(
            tenant=tenant,
            decision_id=decision.pk,
            succeeded=False,
            outcome=f"failed: {type(error).__name__}: {error}"[:500],
        )


def evolution_tick_due() -> list[tuple[int, int]]:
    """(tenant id, policy id) of every enabled policy of every tenant: the beat (`evolution.tick`) enqueues one
    `evolution.tick_policy` task for each, so one slow policy holds up no other."""
    return [(policy.tenant_id, policy.pk) for policy in dangerously_policies_to_tick()]


def evolution_tick_policy(*, tenant_id: int, policy_id: int, enqueued_at: datetime | None = None) -> bool:
    """One policy's tick, as the task `evolution.tick_policy` runs it: under the policy's row lock, skipped when
    the policy is gone, disabled, or ticked since `enqueued_at` (a message delivered twice, or a backlog of
    ticks behind a slow one). Returns whether it ticked."""
    tenant = tenant_get(tenant_id=tenant_id)
    with transaction.atomic():
        policy = policy_lock_enabled(tenant=tenant, policy_id=policy_id)
        if policy is None:
            return False
        if enqueued_at is not None and policy.last_tick_at is not None and policy.last_tick_at >= enqueued_at:
            return False
        evolution_tick(tenant=tenant, policy=policy)
    return True


def evolution_tick_all() -> int:
    """Every enabled policy of every tenant ticked in this process, one after the other (observe mode computes
    its signals only); the beat does not use it (see `evolution_tick_due`). A policy whose tick fails is
    logged and the others still tick. Returns how many ticked."""
    ticked = 0
    for policy in dangerously_policies_to_tick():
        try:
            evolution_tick(tenant=policy.tenant, policy=policy)
        except Exception:
            logger.exception("evolution tick of policy %s failed", policy.pk)
            continue
        ticked += 1
    return ticked
