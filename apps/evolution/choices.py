"""The evolution app's choices and status sets: the one place other apps read them from (models.py re-exports
them for migrations and this app's own code)."""

from django.db import models


class PolicyMode(models.TextChoices):
    OBSERVE = "observe", "Observe (signals only)"
    PROPOSE = "propose", "Propose (decisions wait for a person)"
    AUTO = "auto", "Automatic"


class ApprovalMode(models.TextChoices):
    AUTOMATIC = "automatic", "Automatic"
    ONE_OPERATOR = "one_operator", "One operator"
    TWO_PERSON = "two_person", "Two people"


class UpdateKind(models.TextChoices):
    WEIGHTS = "weights"
    HARNESS = "harness"


class HarnessProposer(models.TextChoices):
    RULE = "rule", "Rules (no model)"
    MODEL = "model", "A model rewrites the prompt"


class ClusterKind(models.TextChoices):
    FAILED_RESULT = "failed_result", "Tool result reports an error"
    MALFORMED_CALL = "malformed_call", "Tool call the agent could not parse"


class DecisionKind(models.TextChoices):
    TRAIN = "train"
    EVALUATE = "evaluate"
    RELEASE = "release"
    PROMOTE = "promote"
    ROLLBACK = "rollback", "Roll back"
    PAUSE_LEARNING = "pause_learning", "Pause learning"
    RESTART_LEARNER = "restart_learner", "Restart the learner from production"
    UPDATE_HARNESS = "update_harness", "Update the harness"
    NOTHING = "nothing", "Do nothing"


class DecisionStatus(models.TextChoices):
    PROPOSED = "proposed", "Waiting for approval"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


OPEN_DECISION_STATUSES = (DecisionStatus.PROPOSED, DecisionStatus.APPROVED, DecisionStatus.RUNNING)
