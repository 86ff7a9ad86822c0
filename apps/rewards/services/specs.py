"""Defining reward specs (what a reward may be, which one trains, how sources combine)."""

from django.db import transaction

from apps.audit.services import Actor, audit_record
from apps.core.errors import Conflict, ValidationFailed
from apps.rewards.models import Combination, RewardKind, RewardSource, RewardSpec
from apps.tenants.models import Tenant
from workers.rewards.specs import SpecData, spec_problems

SPEC_FIELDS = (
    "agent_name",
    "name",
    "kind",
    "minimum",
    "maximum",
    "categories",
    "is_training_reward",
    "combination",
    "source_priority",
    "source_weights",
    "description",
)


def _spec_validate(fields: dict) -> None:
    problems = spec_problems(
        SpecData(
            name=fields["name"],
            kind=fields["kind"],
            minimum=fields.get("minimum"),
            maximum=fields.get("maximum"),
            categories=fields.get("categories") or {},
        )
    )
    sources = set(RewardSource.values)
    if fields.get("is_training_reward") and fields["kind"] == RewardKind.CRITIQUE:
        problems["is_training_reward"] = "a critique (free text) cannot be the training reward"
    unknown = [source for source in fields.get("source_priority") or [] if source not in sources]
    unknown += [source for source in fields.get("source_weights") or {} if source not in sources]
    if unknown:
        problems["source_priority"] = f"unknown sources: {', '.join(sorted(set(unknown)))}"
    if fields.get("combination") == Combination.WEIGHTED_SUM and not fields.get("source_weights"):
        problems["source_weights"] = "a weighted sum needs {source: weight}"
    if problems:
        raise ValidationFailed(
            "the reward spec is invalid: " + "; ".join(f"{k}: {v}" for k, v in problems.items()),
            fields={name: [problem] for name, problem in problems.items()},
        )


@transaction.atomic
def reward_spec_create(*, tenant: Tenant, actor: Actor, **fields) -> RewardSpec:
    """Defines a reward spec (audited `reward_spec.create`). One name per agent, one training reward per
    agent (blank agent: tenant-wide): a second is a 409."""
    fields = {name: value for name, value in fields.items() if name in SPEC_FIELDS and value is not None}
    fields.setdefault("agent_name", "")
    _spec_validate(fields)
    clashes = RewardSpec.objects.for_tenant(tenant).filter(agent_name=fields["agent_name"])
    if clashes.filter(name=fields["name"]).exists():
        raise Conflict(
            f"a reward spec {fields['name']!r} already exists for this agent", code="reward_spec_exists"
        )
    if fields.get("is_training_reward") and clashes.filter(is_training_reward=True).exists():
        raise Conflict("this agent already has a training reward spec", code="training_reward_exists")
    spec = RewardSpec.objects.create(tenant=tenant, **fields)
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="reward_spec.create",
        target=spec,
        data={name: getattr(spec, name) for name in SPEC_FIELDS},
    )
    return spec
