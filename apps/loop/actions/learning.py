"""train, restart_learner, pause_learning: the policy's online run started, stopped, started again."""

from typing import TYPE_CHECKING

from apps.audit.services import Actor
from apps.core.errors import Conflict
from apps.evolution.decisions import decision_start
from apps.loop.actions.common import (
    NOT_HYPERPARAMETERS,
    RUN_SETTINGS,
    STOP_WAIT_SECONDS,
    _fail,
    _learner,
    _note,
    _production,
    _succeed,
    _waited,
    policy_actor,
)
from apps.tenants.models import Tenant

if TYPE_CHECKING:
    from apps.evolution.models import Decision, EvolutionPolicy


def learner_start(*, tenant: Tenant, policy: "EvolutionPolicy", actor: Actor):
    """An online run of `policy.model` from production with the policy's recipe (serving nothing itself)."""
    from apps.training.online import online_run_start

    production = _production(tenant=tenant, policy=policy)
    if production is None:
        raise Conflict(f"{policy.model} has no production version to learn from", code="no_production")
    recipe = policy.recipe or {}
    settings = {key: recipe[key] for key in RUN_SETTINGS if key in recipe}
    return online_run_start(
        tenant=tenant,
        actor=actor,
        base_version=production,
        hyperparameters={key: value for key, value in recipe.items() if key not in NOT_HYPERPARAMETERS},
        publish_to_backends=False,
        **settings,
    )


def _train(*, tenant, decision, policy) -> "Decision":
    running = _learner(tenant=tenant, policy=policy)
    if running is not None:
        return _fail(
            tenant, decision, f"a learner already runs (the online run from v{running.base_version.number})"
        )
    run = learner_start(tenant=tenant, policy=policy, actor=policy_actor(policy))
    return _succeed(
        tenant,
        decision,
        f"an online run learns from production v{run.base_version.number}",
        started={"online_runs": [run.pk]},
    )


def _stop_learner(*, tenant, decision, policy, verb: str) -> "Decision | None":
    """Asks the policy's learner to stop; the decision runs until it left `running` (None: there was none)."""
    from apps.training.online import online_run_stop

    running = _learner(tenant=tenant, policy=policy)
    if running is None:
        return None
    _note(decision)
    online_run_stop(tenant=tenant, actor=policy_actor(policy), run_id=running.pk)
    return decision_start(
        tenant=tenant,
        decision_id=decision.pk,
        started={"online_runs": [running.pk]},
        outcome=f"{verb}: the online run from v{running.base_version.number} is asked to stop",
    )


def _restart_learner(*, tenant, decision, policy) -> "Decision":
    stopping = _stop_learner(tenant=tenant, decision=decision, policy=policy, verb="restart")
    if stopping is not None:
        return stopping
    return _start_again(tenant=tenant, decision=decision, policy=policy)


def _start_again(*, tenant, decision, policy) -> "Decision":
    run = learner_start(tenant=tenant, policy=policy, actor=policy_actor(policy))
    return _succeed(
        tenant,
        decision,
        f"an online run learns again from production v{run.base_version.number}",
        started={"online_runs": [run.pk]},
    )


def _stopped(*, decision) -> tuple[bool, float]:
    """Whether every online run the decision asked to stop left `running`, and seconds since it started."""

    from apps.training.online import online_runs_running

    ids = (decision.started or {}).get("online_runs", [])
    still = online_runs_running(tenant=decision.tenant_id, run_ids=ids)
    return not still, _waited(decision)


def _follow_restart(*, tenant, decision, policy) -> "Decision":
    stopped, waited = _stopped(decision=decision)
    if stopped:
        return _start_again(tenant=tenant, decision=decision, policy=policy)
    if waited > STOP_WAIT_SECONDS:
        return _fail(tenant, decision, f"the learner did not stop within {STOP_WAIT_SECONDS}s")
    return decision


def _pause_learning(*, tenant, decision, policy) -> "Decision":
    stopping = _stop_learner(tenant=tenant, decision=decision, policy=policy, verb="pause")
    if stopping is None:
        return _succeed(tenant, decision, "no learner was running")
    return stopping


def _follow_pause(*, tenant, decision, policy) -> "Decision":
    stopped, waited = _stopped(decision=decision)
    if stopped:
        return _succeed(tenant, decision, "learning paused: the learner stopped")
    if waited > STOP_WAIT_SECONDS:
        return _fail(tenant, decision, f"the learner did not stop within {STOP_WAIT_SECONDS}s")
    return decision
