"""Roles, scopes and the role × action table: the one place that says who may do what.

People act through their role in a tenant; machines act through API-key scopes. Each action names the
roles allowed to take it and the scope a key needs for it.
"""

from enum import StrEnum

from django.db import models


class Role(models.TextChoices):
    ADMIN = "admin", "Admin"
    OPERATOR = "operator", "Operator"
    ANNOTATOR = "annotator", "Annotator"
    VIEWER = "viewer", "Viewer"


class Scope(StrEnum):
    INFERENCE = "inference"
    REWARDS_WRITE = "rewards:write"
    TRAJECTORIES_READ = "trajectories:read"
    TRAJECTORIES_WRITE = "trajectories:write"
    ADMIN = "admin"


class Action(StrEnum):
    TENANT_VIEW = "tenant.view"
    POLICY_VIEW = "policy.view"
    POLICY_EDIT = "policy.edit"
    MEMBER_VIEW = "member.view"
    MEMBER_MANAGE = "member.manage"
    API_KEY_VIEW = "api_key.view"
    API_KEY_MANAGE = "api_key.manage"
    AUDIT_VIEW = "audit.view"
    TRAJECTORY_VIEW = "trajectory.view"
    TRAJECTORY_IMPORT = "trajectory.import"
    TRAJECTORY_REPLAY = "trajectory.replay"
    TRAJECTORY_END = "trajectory.end"
    BACKEND_VIEW = "backend.view"
    BACKEND_MANAGE = "backend.manage"
    BACKEND_CREDENTIAL_MANAGE = "backend.credential_manage"
    REWARD_VIEW = "reward.view"
    REWARD_WRITE = "reward.write"
    REWARD_OVERRIDE = "reward.override"
    REWARD_SPEC_MANAGE = "reward_spec.manage"
    EVALUATOR_MANAGE = "evaluator.manage"
    TRAJECTORY_REVIEW = "trajectory.review"
    QUALIFICATION_RUN = "qualification.run"
    QUALIFICATION_OVERRIDE = "qualification.override"
    ANNOTATION_VIEW = "annotation.view"
    ANNOTATION_LABEL = "annotation.label"
    ANNOTATION_MANAGE = "annotation.manage"
    EVAL_VIEW = "eval.view"
    EVAL_MANAGE = "eval.manage"
    RELEASE_VIEW = "release.view"
    RELEASE_MANAGE = "release.manage"
    RELEASE_APPROVE = "release.approve"
    RELEASE_ROLLBACK = "release.rollback"
    SERVING_VIEW = "serving.view"
    TRAINING_VIEW = "training.view"
    TRAINING_MANAGE = "training.manage"
    MODEL_VERSION_VIEW = "model_version.view"
    MODEL_REGISTER = "model.register"
    MODEL_VERSION_PUBLISH = "model_version.publish"
    MODEL_ALIAS_MANAGE = "model_alias.manage"
    EVOLUTION_VIEW = "evolution.view"
    EVOLUTION_MANAGE = "evolution.manage"
    EVOLUTION_APPROVE = "evolution.approve"


_EVERYONE = frozenset(Role)
_ADMIN = frozenset({Role.ADMIN})
_OPERATORS = frozenset({Role.ADMIN, Role.OPERATOR})

# action: (roles allowed, scope an API key needs; None = any valid key of the tenant)
PERMISSIONS: dict[Action, tuple[frozenset[Role], Scope | None]] = {
    Action.TENANT_VIEW: (_EVERYONE, None),
    Action.POLICY_VIEW: (_EVERYONE, Scope.ADMIN),
    Action.POLICY_EDIT: (_ADMIN, Scope.ADMIN),
    Action.MEMBER_VIEW: (_OPERATORS | {Role.VIEWER}, Scope.ADMIN),
    Action.MEMBER_MANAGE: (_ADMIN, Scope.ADMIN),
    Action.API_KEY_VIEW: (_ADMIN, Scope.ADMIN),
    Action.API_KEY_MANAGE: (_ADMIN, Scope.ADMIN),
    Action.AUDIT_VIEW: (_OPERATORS, Scope.ADMIN),
    Action.TRAJECTORY_VIEW: (_EVERYONE, Scope.TRAJECTORIES_READ),
    Action.TRAJECTORY_IMPORT: (_OPERATORS, Scope.TRAJECTORIES_WRITE),
    Action.TRAJECTORY_REPLAY: (_OPERATORS, Scope.TRAJECTORIES_WRITE),
    Action.TRAJECTORY_END: (_OPERATORS, Scope.TRAJECTORIES_WRITE),
    Action.BACKEND_VIEW: (_OPERATORS | {Role.VIEWER}, Scope.ADMIN),
    Action.BACKEND_MANAGE: (_OPERATORS, Scope.ADMIN),
    # a backend's API credential, and the address of a backend that has one (where the credential goes)
    Action.BACKEND_CREDENTIAL_MANAGE: (_ADMIN, Scope.ADMIN),
    Action.REWARD_VIEW: (_EVERYONE, Scope.TRAJECTORIES_READ),
    Action.REWARD_WRITE: (_OPERATORS | {Role.ANNOTATOR}, Scope.REWARDS_WRITE),
    Action.REWARD_OVERRIDE: (_OPERATORS, Scope.ADMIN),
    Action.REWARD_SPEC_MANAGE: (_OPERATORS, Scope.ADMIN),
    Action.EVALUATOR_MANAGE: (_OPERATORS, Scope.ADMIN),
    Action.TRAJECTORY_REVIEW: (_OPERATORS, Scope.TRAJECTORIES_WRITE),
    Action.QUALIFICATION_RUN: (_OPERATORS, Scope.TRAJECTORIES_WRITE),
    Action.QUALIFICATION_OVERRIDE: (_OPERATORS, Scope.ADMIN),
    Action.ANNOTATION_VIEW: (_EVERYONE, Scope.TRAJECTORIES_READ),
    Action.ANNOTATION_LABEL: (_OPERATORS | {Role.ANNOTATOR}, Scope.REWARDS_WRITE),
    Action.ANNOTATION_MANAGE: (_OPERATORS, Scope.ADMIN),
    Action.EVAL_VIEW: (_EVERYONE, Scope.TRAJECTORIES_READ),
    Action.EVAL_MANAGE: (_OPERATORS, Scope.ADMIN),
    Action.RELEASE_VIEW: (_EVERYONE, Scope.TRAJECTORIES_READ),
    Action.RELEASE_MANAGE: (_OPERATORS, Scope.ADMIN),
    Action.RELEASE_APPROVE: (_OPERATORS, Scope.ADMIN),
    Action.RELEASE_ROLLBACK: (_OPERATORS, Scope.ADMIN),
    Action.SERVING_VIEW: (_EVERYONE, Scope.TRAJECTORIES_READ),
    Action.TRAINING_VIEW: (_EVERYONE, Scope.ADMIN),
    Action.TRAINING_MANAGE: (_OPERATORS, Scope.ADMIN),
    Action.MODEL_VERSION_VIEW: (_EVERYONE, Scope.ADMIN),
    Action.MODEL_VERSION_PUBLISH: (_OPERATORS, Scope.ADMIN),
    Action.MODEL_REGISTER: (_ADMIN, Scope.ADMIN),  # reads the installation's disk (the tenant's inbox)
    Action.MODEL_ALIAS_MANAGE: (_OPERATORS, Scope.ADMIN),
    Action.EVOLUTION_VIEW: (_OPERATORS | {Role.VIEWER}, Scope.ADMIN),
    Action.EVOLUTION_MANAGE: (_OPERATORS, Scope.ADMIN),
    Action.EVOLUTION_APPROVE: (_OPERATORS, Scope.ADMIN),
}


def role_can(role: str | None, action: Action) -> bool:
    if role is None:
        return False
    return Role(role) in PERMISSIONS[action][0]


def scopes_can(scopes, action: Action) -> bool:
    needed = PERMISSIONS[action][1]
    return needed is None or needed.value in scopes
