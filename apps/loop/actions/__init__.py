"""Carries out the control plane's decisions with the services the product already has.

`decision_execute` takes an approved decision (approved → running, or straight to succeeded | failed);
`decision_follow` looks at a running one (its online run, gate or release) and finishes it when it ended.
Neither blocks: what takes time (a learner stopping, a gate measuring, a canary) is looked at again on the
next tick. A service's refusal (a domain error) fails the decision with the refusal as its outcome.

- train → an online run from production with the policy's recipe (`publish_to_backends=False`: releases
  decide what serves);
- evaluate → the policy's gate on the decision's version: `{"environment": "weather", "cases", "seed"}` is
  measured by the `evolution.evaluate` task (eval queue), `{"suite_id"}` by an `apps.evaluation` run; the
  score must reach the best production score + `min_gain` (negative: a tolerance); pass → a child `release`
  decision, fail → a child `restart_learner`;
- release → the candidate loaded on the policy model's backend not serving production (a harness-only
  candidate is served by its `weights_of` backends: nothing to load), then a release with the policy's plan;
- promote → `release_approve` by the person who approved the decision (or the policy, automatic mode);
- rollback → `release_rollback` of the release under way, else production back to its previous version
  (`apps.releases.routing_writes.production_restore`);
- update_harness → the policy's proposer (rule or model) drafts a harness from the failing cluster in the
  `evolution.propose` task (eval queue); it becomes a candidate version over production's weights, and a
  child `evaluate` decision takes it through the same gate, canary and approval as weights;
- restart_learner → stop the learner, and once it left `running`, start a new one from production;
- pause_learning → stop the learner.

The package: `common` (what the actions share), `dispatch` (kind → action), and one module per
family of actions (`learning`, `gating`, `releasing`, `harness_updates`); here, the public names.
"""

from apps.loop.actions.common import (
    GATE_WAIT_SECONDS,
    NOT_HYPERPARAMETERS,
    RUN_SETTINGS,
    STOP_WAIT_SECONDS,
    policy_actor,
)
from apps.loop.actions.dispatch import decision_execute, decision_follow
from apps.loop.actions.gating import gate_measure, gate_run
from apps.loop.actions.harness_updates import harness_run
from apps.loop.actions.learning import learner_start

__all__ = [
    "GATE_WAIT_SECONDS",
    "NOT_HYPERPARAMETERS",
    "RUN_SETTINGS",
    "STOP_WAIT_SECONDS",
    "decision_execute",
    "decision_follow",
    "gate_measure",
    "gate_run",
    "harness_run",
    "learner_start",
    "policy_actor",
]
