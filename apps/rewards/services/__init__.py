"""Every write of apps.rewards, a package of cohesive modules whose public names are re-exported here, so
callers import from `apps.rewards.services` whatever module holds the function:

- `rewards`: appending and setting rewards (the gateway's paths, the REST API's and console's, imports);
- `specs`: defining reward specs;
- `evaluators`: evaluator versions, their runs and the rewards those runs store;
- `storing`: what they share (idempotency scopes, the sources a principal may name, spec checks, the
  late-reward window, the idempotent insert).

Rewards are never edited; the same idempotency key twice from the same source and principal stores one
reward (keys are namespaced, `idempotency_scope`); an operator's override is a new reward marked as such,
audited."""

from apps.rewards.services.evaluators import (
    EVALUATOR_EDITABLE,
    EVALUATOR_FIELDS,
    EVALUATOR_MEANING,
    evaluator_create,
    evaluator_reward_existing,
    evaluator_reward_key,
    evaluator_reward_store,
    evaluator_run,
    evaluator_run_attempts_add,
    evaluator_run_claim,
    evaluator_run_enqueue,
    evaluator_run_finish,
    evaluator_run_session_set,
    evaluator_update,
    evaluators_enqueue,
)
from apps.rewards.services.rewards import (
    SET_REWARD_ATTEMPTS,
    reward_append_for_agent,
    reward_create,
    reward_set_for_interaction,
    rewards_import,
)
from apps.rewards.services.specs import SPEC_FIELDS, reward_spec_create
from apps.rewards.services.storing import EVALUATOR_PRINCIPAL, KEY_SOURCES, idempotency_scope

__all__ = [
    "EVALUATOR_EDITABLE",
    "EVALUATOR_FIELDS",
    "EVALUATOR_MEANING",
    "EVALUATOR_PRINCIPAL",
    "KEY_SOURCES",
    "SET_REWARD_ATTEMPTS",
    "SPEC_FIELDS",
    "evaluator_create",
    "evaluator_reward_existing",
    "evaluator_reward_key",
    "evaluator_reward_store",
    "evaluator_run",
    "evaluator_run_attempts_add",
    "evaluator_run_claim",
    "evaluator_run_enqueue",
    "evaluator_run_finish",
    "evaluator_run_session_set",
    "evaluator_update",
    "evaluators_enqueue",
    "idempotency_scope",
    "reward_append_for_agent",
    "reward_create",
    "reward_set_for_interaction",
    "reward_spec_create",
    "rewards_import",
]
