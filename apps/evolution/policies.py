"""Every write of evolution policies: created, edited (the revision bumped: decisions keep the revision they
were taken under, so an edit while a release runs does not touch it), deleted. Audited `evolution_policy.*`.

Minimal for the control plane and the demo: the validation with field errors the README describes is the
console slice's to add here, keeping these names and arguments."""

from django.db import transaction
from django.db.models import F

from apps.audit.services import Actor, audit_record
from apps.core.errors import ValidationFailed
from apps.core.selectors import get_in_tenant
from apps.evolution.models import ApprovalMode, EvolutionPolicy, PolicyMode
from apps.tenants.models import Tenant

FIELDS = (
    "agent_name",
    "mode",
    "enabled",
    "window_seconds",
    "signals",
    "update_kinds",
    "recipe",
    "gate",
    "release_plan",
    "approval_mode",
    "cooldown_seconds",
    "compute_budget_seconds",
    "decision_ttl_seconds",
)


def _validate(values: dict) -> None:
    problems = {}
    if "mode" in values and values["mode"] not in PolicyMode.values:
        problems["mode"] = [f"one of {', '.join(PolicyMode.values)}"]
    if "approval_mode" in values and values["approval_mode"] not in ApprovalMode.values:
        problems["approval_mode"] = [f"one of {', '.join(ApprovalMode.values)}"]
    unknown = set(values) - set(FIELDS)
    for name in unknown:
        problems[name] = ["not a setting of a policy"]
    if problems:
        raise ValidationFailed("invalid policy settings", code="invalid_policy", fields=problems)


@transaction.atomic
def policy_create(*, tenant: Tenant, actor: Actor, model: str, **values) -> EvolutionPolicy:
    _validate(values)
    policy = EvolutionPolicy.objects.create(tenant=tenant, model=model, updated_by=actor.label, **values)
    audit_record(
        tenant=tenant, actor=actor, verb="evolution_policy.create", target=policy, data={"model": model}
    )
    return policy


@transaction.atomic
def policy_update(*, tenant: Tenant, actor: Actor, policy_id, **values) -> EvolutionPolicy:
    _validate(values)
    policy = get_in_tenant(
        EvolutionPolicy.objects.select_for_update(), tenant=tenant, code="policy_not_found", pk=policy_id
    )
    for name, value in values.items():
        setattr(policy, name, value)
    policy.revision = F("revision") + 1
    policy.updated_by = actor.label
    policy.save()
    policy.refresh_from_db()
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="evolution_policy.update",
        target=policy,
        data={"revision": policy.revision, "changed": sorted(values)},
    )
    return policy
