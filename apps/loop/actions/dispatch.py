"""Which action carries out, and which follows, each kind of decision."""

from typing import TYPE_CHECKING

from apps.core.errors import DomainError
from apps.evolution.choices import DecisionKind, DecisionStatus
from apps.evolution.selectors import decision_get
from apps.loop.actions.common import _fail, _succeed
from apps.loop.actions.gating import _evaluate, _follow_evaluate
from apps.loop.actions.harness_updates import _follow_update_harness, _update_harness
from apps.loop.actions.learning import (
    _follow_pause,
    _follow_restart,
    _pause_learning,
    _restart_learner,
    _train,
)
from apps.loop.actions.releasing import _follow_release, _promote, _release, _rollback
from apps.tenants.models import Tenant

if TYPE_CHECKING:
    from apps.evolution.models import Decision


def decision_execute(*, tenant: Tenant, decision: "Decision") -> "Decision":
    """Starts an approved decision; returns it running, succeeded or failed."""
    decision = decision_get(tenant=tenant, decision_id=decision.pk)
    if decision.status != DecisionStatus.APPROVED:
        return decision
    handler = _EXECUTE.get(DecisionKind(decision.kind))
    if handler is None:
        return _fail(tenant, decision, f"no action carries out a {decision.kind} decision")
    try:
        return handler(tenant=tenant, decision=decision, policy=decision.policy)
    except DomainError as error:
        return _fail(tenant, decision, f"refused ({error.code}): {error.message}")


def decision_follow(*, tenant: Tenant, decision: "Decision") -> "Decision":
    """Looks at a running decision and finishes it when what it started ended; returns it."""
    decision = decision_get(tenant=tenant, decision_id=decision.pk)
    if decision.status != DecisionStatus.RUNNING:
        return decision
    handler = _FOLLOW.get(DecisionKind(decision.kind))
    if handler is None:
        return _succeed(tenant, decision, decision.outcome or "done")
    try:
        return handler(tenant=tenant, decision=decision, policy=decision.policy)
    except DomainError as error:
        return _fail(tenant, decision, f"refused ({error.code}): {error.message}")


def _nothing(*, tenant, decision, policy) -> "Decision":
    return _succeed(tenant, decision, "nothing to do")


_EXECUTE = {
    DecisionKind.TRAIN: _train,
    DecisionKind.EVALUATE: _evaluate,
    DecisionKind.RELEASE: _release,
    DecisionKind.PROMOTE: _promote,
    DecisionKind.ROLLBACK: _rollback,
    DecisionKind.PAUSE_LEARNING: _pause_learning,
    DecisionKind.RESTART_LEARNER: _restart_learner,
    DecisionKind.UPDATE_HARNESS: _update_harness,
    DecisionKind.NOTHING: _nothing,
}


_FOLLOW = {
    DecisionKind.UPDATE_HARNESS: _follow_update_harness,
    DecisionKind.EVALUATE: _follow_evaluate,
    DecisionKind.RELEASE: _follow_release,
    DecisionKind.PAUSE_LEARNING: _follow_pause,
    DecisionKind.RESTART_LEARNER: _follow_restart,
}
