"""The actions' shared pieces: the policy's actor, production and learner, finishing a decision, notes."""

import logging
from typing import TYPE_CHECKING

from apps.audit.services import Actor
from apps.evolution.decisions import decision_finish, decision_note
from apps.tenants.models import Tenant

if TYPE_CHECKING:
    from apps.evolution.models import Decision, EvolutionPolicy

logger = logging.getLogger(__name__)


# Keys of `recipe` that are the online run's own settings; the rest are its hyperparameters.
RUN_SETTINGS = ("samples_per_step", "publish_every", "staleness_bound", "rollout_bound", "max_steps")


NOT_HYPERPARAMETERS = (*RUN_SETTINGS, "evaluate_every")


STOP_WAIT_SECONDS = 300  # a learner that does not leave `running` in this long fails a restart


GATE_WAIT_SECONDS = 1800  # a gate that gives no score in this long fails its evaluation


def policy_actor(policy: "EvolutionPolicy") -> Actor:
    return Actor.system(f"evolution policy {policy.pk}")


def _production(*, tenant: Tenant, policy: "EvolutionPolicy"):
    from apps.training.selectors import alias_resolve

    return alias_resolve(tenant=tenant, name=policy.model, alias="production")


def _learner(*, tenant: Tenant, policy: "EvolutionPolicy"):
    from apps.training.online import online_run_active

    run = online_run_active(tenant=tenant)
    return run if run is not None and run.model_name == policy.model else None


def _fail(tenant: Tenant, decision: "Decision", outcome: str, **more) -> "Decision":
    return decision_finish(tenant=tenant, decision_id=decision.pk, succeeded=False, outcome=outcome, **more)


def _succeed(tenant: Tenant, decision: "Decision", outcome: str, **more) -> "Decision":
    return decision_finish(tenant=tenant, decision_id=decision.pk, succeeded=True, outcome=outcome, **more)


def _note(decision: "Decision", **values) -> None:
    """Keeps `values` in the decision's evidence before it starts: the gate it runs (a policy edit meanwhile
    does not change it) and when it started (what waits on a worker gives up after a while)."""
    from django.utils import timezone

    noted = decision_note(
        tenant=decision.tenant,
        decision_id=decision.pk,
        evidence={"started_at": timezone.now().isoformat(), **values},
    )
    decision.evidence = noted.evidence


def _waited(decision: "Decision") -> float:
    """Seconds since the decision started (see _note; without a note, since it was recorded)."""
    from datetime import datetime

    from django.utils import timezone

    noted = decision.evidence.get("started_at")
    since = datetime.fromisoformat(noted) if noted else decision.created_at
    return (timezone.now() - since).total_seconds()
