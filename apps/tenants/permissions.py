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
    BACKEND_VIEW = "backend.view"
    BACKEND_MANAGE = "backend.manage"


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
    Action.BACKEND_VIEW: (_OPERATORS | {Role.VIEWER}, Scope.ADMIN),
    Action.BACKEND_MANAGE: (_OPERATORS, Scope.ADMIN),
}


def role_can(role: str | None, action: Action) -> bool:
    if role is None:
        return False
    return Role(role) in PERMISSIONS[action][0]


def scopes_can(scopes, action: Action) -> bool:
    needed = PERMISSIONS[action][1]
    return needed is None or needed.value in scopes
