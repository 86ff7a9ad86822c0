"""Harness versions: their writes (created validated, numbered per model, audited; a candidate model version
that carries one), the proposals that lead to them, and what the gateway applies (`harness_for_version`,
`version_serving`, cached per process).

A harness-only model version keeps its own number (recorded on every step it serves, so releases measure it
as an arm of its own) and is served by the backends of `weights_of`. The gateway keeps, per process and
model, a map of the versions that have a harness or another version's weights, read again every
`AREAL_ROUTING_CACHE_SECONDS` like the routing plan (and at once, at most every second, for a version newer
than the map: one registered a moment ago); every other version is served by itself without a harness.
"""

import time
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import Max

from apps.audit.services import Actor, audit_record
from apps.core.errors import ValidationFailed
from apps.evolution.models import HarnessVersion
from apps.tenants.models import Tenant
from workers.evolution.harness import HarnessSpec, exemplar_messages, validate_harness
from workers.evolution.proposers import Proposer

PROPOSER_NAME_CHARS = 40
RATIONALE_CHARS = 2000
MISSING_RELOAD_SECONDS = 1.0  # a version newer than the cached map is looked up again at most this often


def harness_spec(harness: HarnessVersion) -> HarnessSpec:
    return HarnessSpec(
        label=harness.label,
        system_prompt=harness.system_prompt,
        exemplars=tuple(exemplar_messages(exemplar) or [] for exemplar in harness.exemplars),
        tool_routing=dict(harness.tool_routing),
        tool_versions=dict(harness.tool_versions),
    )


def _normalized_exemplars(exemplars: list) -> list[dict]:
    """Stored exemplars: `{"situation", "messages"}`, and `trajectory` (the source's id) for one taken from
    traffic, so that it goes when its trajectory does (`harness_exemplars_forget`)."""
    out = []
    for exemplar in exemplars:
        if not isinstance(exemplar, dict):
            out.append({"situation": "", "messages": exemplar})
            continue
        row = {"situation": str(exemplar.get("situation", ""))[:300], "messages": exemplar["messages"]}
        if exemplar.get("trajectory"):
            row["trajectory"] = str(exemplar["trajectory"])[:64]
        out.append(row)
    return out


def harness_applies_to(harness: HarnessVersion | None, agent_name: str) -> bool:
    """Whether `harness` is for requests of `agent_name`: its own agent's, or every agent's when it names none."""
    return harness is not None and (not harness.agent_name or harness.agent_name == agent_name)


@transaction.atomic
def harness_version_create(
    *,
    tenant: Tenant,
    actor: Actor,
    model: str,
    system_prompt: str = "",
    exemplars: list | None = None,
    tool_routing: dict | None = None,
    tool_versions: dict | None = None,
    parent: HarnessVersion | None = None,
    proposer: str = "",
    rationale: str = "",
    agent_name: str = "",
    quotes_traffic: bool = False,
) -> HarnessVersion:
    """The next harness version of `model` (h1, h2, ...), for the requests of `agent_name` (blank: every
    agent's). `quotes_traffic`: it adds text taken from recorded conversations (a decision carrying it then
    waits for a person, `decisions.approvals_required`). Validation (field errors, nothing written): the
    tool routing's entries, exemplars as lists of messages with roles, bounded sizes, a parent of this tenant
    and model, for the same agent or every agent. Tenancy: the tenant row's lock serializes numbering (per
    tenant and model, so a label names one harness of the model). Audited `harness_version.create`."""
    exemplars, tool_routing, tool_versions = exemplars or [], tool_routing or {}, tool_versions or {}
    fields = validate_harness(
        system_prompt=system_prompt,
        exemplars=exemplars,
        tool_routing=tool_routing,
        tool_versions=tool_versions,
    )
    if not model:
        fields.setdefault("model", []).append("required")
    if parent is not None and (parent.tenant_id != tenant.pk or parent.model != model):
        fields.setdefault("parent", []).append("not a harness of this model")
    elif parent is not None and parent.agent_name not in ("", agent_name):
        fields.setdefault("parent", []).append("a harness of another agent")
    if len(agent_name) > 200:
        fields.setdefault("agent_name", []).append("at most 200 characters")
    if len(proposer) > PROPOSER_NAME_CHARS:
        fields.setdefault("proposer", []).append(f"at most {PROPOSER_NAME_CHARS} characters")
    if len(rationale) > RATIONALE_CHARS:
        fields.setdefault("rationale", []).append(f"at most {RATIONALE_CHARS} characters")
    if fields:
        raise ValidationFailed("the harness is invalid", fields=fields, code="invalid_harness")
    type(tenant).objects.select_for_update().filter(pk=tenant.pk).values_list("pk", flat=True).get()
    highest = HarnessVersion.objects.filter(tenant=tenant, model=model).aggregate(top=Max("number"))["top"]
    harness = HarnessVersion.objects.create(
        tenant=tenant,
        model=model,
        agent_name=agent_name,
        number=(highest or 0) + 1,
        parent=parent,
        system_prompt=system_prompt,
        exemplars=_normalized_exemplars(exemplars),
        tool_routing=tool_routing,
        tool_versions=tool_versions,
        proposer=proposer,
        rationale=rationale,
        quotes_traffic=quotes_traffic,
        created_by=actor.label,
    )
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="harness_version.create",
        target=harness,
        data={
            "model": model,
            "agent": agent_name,
            "label": harness.label,
            "parent": parent.label if parent else None,
            "proposer": proposer,
            "tools": sorted(tool_routing),
            "exemplars": len(exemplars),
            "quotes_traffic": quotes_traffic,
        },
    )
    return harness


@transaction.atomic
def harness_candidate_create(*, tenant: Tenant, actor: Actor, harness: HarnessVersion, production_version):
    """The model version that carries `harness` over production's weights: the next number of the model,
    production's checkpoint and tokenizer, parent = production, `weights_of` = the version whose backends
    serve production's weights, status candidate; it then goes through evaluation, canary and approval like
    any candidate. Registered (and audited) by apps.training's `model_version_register`."""
    from apps.training.choices import VersionStatus
    from apps.training.services import model_version_register

    if harness.tenant_id != tenant.pk or production_version.tenant_id != tenant.pk:
        raise ValidationFailed("the harness and the version must be this tenant's")
    if harness.model != production_version.name:
        raise ValidationFailed(
            f"{harness} is a harness of {harness.model}, not of {production_version.name}",
            fields={"harness": ["of another model"]},
        )
    weights = production_version.weights_of or production_version
    return model_version_register(
        tenant=tenant,
        actor=actor,
        name=production_version.name,
        checkpoint_path=production_version.checkpoint_path,
        tokenizer_hash=production_version.tokenizer_hash,
        parent=production_version,
        status=VersionStatus.CANDIDATE,
        description=f"harness {harness.label} on the weights of {weights.label}",
        harness=harness,
        weights_of=weights,
    )


def harness_propose(
    *,
    tenant: Tenant,
    actor: Actor,
    proposer: Proposer,
    production_version,
    cluster: dict,
    examples: list,
    rationale: str = "",
) -> HarnessVersion | None:
    """Asks `proposer` for a harness from a failing cluster and production's current harness, and stores the
    proposal as the next harness version (parent: production's harness); None when it proposes nothing. The
    proposer runs outside any transaction (a model proposer waits on a backend).

    The harness is for the cluster's agent (`cluster["agent_name"]`, the policy's; blank: every agent), and
    starts from production's harness only when that one is for the same agent or every agent: another
    agent's exemplars and prompt are never carried into it. It `quotes_traffic` when it adds exemplars (taken
    from conversations) or has a model rewrite the prompt from conversations: then a person approves it."""
    agent_name = str(cluster.get("agent_name") or "")
    current = production_version.harness
    if not harness_applies_to(current, agent_name):
        current = None
    base = _proposal_base(current)
    spec = proposer.propose(cluster, base, examples)
    if spec is None:
        return None
    inherited = [exemplar_messages(exemplar) for exemplar in (base.exemplars if base else ())]
    added = [exemplar for exemplar in spec.exemplars if exemplar_messages(exemplar) not in inherited]
    rewritten = bool(getattr(proposer, "quotes_conversations", False)) and spec.system_prompt != (
        base.system_prompt if base else ""
    )
    return harness_version_create(
        tenant=tenant,
        actor=actor,
        model=production_version.name,
        agent_name=agent_name,
        system_prompt=spec.system_prompt,
        exemplars=[exemplar if isinstance(exemplar, dict) else list(exemplar) for exemplar in spec.exemplars],
        tool_routing=dict(spec.tool_routing),
        tool_versions=dict(spec.tool_versions),
        parent=current,
        proposer=proposer.name,
        rationale=rationale or f"{cluster.get('tool', '')}: {cluster.get('signature', '')}"[:RATIONALE_CHARS],
        quotes_traffic=bool(added) or rewritten,
    )


def _proposal_base(current: HarnessVersion | None) -> HarnessSpec | None:
    """The current harness as a proposer extends it: its exemplars as stored (with their sources)."""
    if current is None:
        return None
    return HarnessSpec(
        label=current.label,
        system_prompt=current.system_prompt,
        exemplars=tuple(current.exemplars),
        tool_routing=dict(current.tool_routing),
        tool_versions=dict(current.tool_versions),
    )


@transaction.atomic
def harness_exemplars_forget(*, tenant: Tenant, trajectory_ids) -> int:
    """Removes from the tenant's harness versions every exemplar taken from one of `trajectory_ids` (its
    `trajectory`): what quotes a trajectory goes with it (retention). The version keeps its number, prompt and
    routing; each changed one is audited `harness_version.exemplars_forget` (counts only) and this process's
    map of served harnesses is read again (other processes within AREAL_ROUTING_CACHE_SECONDS). Returns how
    many exemplars went."""
    gone = {str(trajectory_id) for trajectory_id in trajectory_ids}
    removed = 0
    for harness in HarnessVersion.objects.for_tenant(tenant).select_for_update().exclude(exemplars=[]):
        kept = [
            exemplar
            for exemplar in harness.exemplars
            if not (isinstance(exemplar, dict) and str(exemplar.get("trajectory") or "") in gone)
        ]
        if len(kept) == len(harness.exemplars):
            continue
        dropped = len(harness.exemplars) - len(kept)
        removed += dropped
        HarnessVersion.objects.filter(pk=harness.pk).update(exemplars=kept)
        audit_record(
            tenant=tenant,
            actor=Actor.system("retention"),
            verb="harness_version.exemplars_forget",
            target=harness,
            data={"label": harness.label, "removed": dropped, "kept": len(kept)},
        )
    if removed:
        transaction.on_commit(version_serving_clear)
    return removed


# ---- what the gateway applies -------------------------------------------------------------------------


@dataclass(frozen=True)
class VersionServing:
    """How one model version is served: `backend_version` is the version string its backends carry (the
    version itself, or its `weights_of`'s number), `harness` the version's harness (None: none), for the
    requests of `harness_agent` (blank: every agent's); `harness_for(agent)` is what the gateway applies."""

    backend_version: str
    harness: HarnessSpec | None
    harness_agent: str = ""

    def harness_for(self, agent_name: str) -> HarnessSpec | None:
        """The harness a request of `agent_name` (its X-Agent-Name) gets: None for another agent's harness."""
        if self.harness is None or (self.harness_agent and self.harness_agent != agent_name):
            return None
        return self.harness


@dataclass(frozen=True)
class _ModelServing:
    expires: float
    reload_after: float  # a number above `highest` is looked up again after this moment
    highest: int | None
    versions: dict  # number (text) → VersionServing, of the versions with a harness or weights of another


_serving: dict[tuple[int, str], _ModelServing] = {}


def version_serving_cached(*, tenant_id: int, model: str, number: str) -> VersionServing | None:
    """The answer from this process's map of the model's harnessed versions, without touching the
    database (None: the map must be read again, at most once per routing-cache period)."""
    entry = _serving.get((tenant_id, model))
    now = time.monotonic()
    if entry is None or entry.expires < now:
        return None
    found = entry.versions.get(number)
    if found is not None:
        return found
    newer = number.isdigit() and (entry.highest is None or int(number) > entry.highest)
    if newer and entry.reload_after < now:  # perhaps registered since the map was read
        return None
    return VersionServing(backend_version=number, harness=None)


def _load(tenant_id: int, model: str) -> _ModelServing:
    from apps.training.selectors import model_version_highest_number, model_versions_served_differently

    rows = model_versions_served_differently(tenant_id=tenant_id, name=model)
    specs: dict[int, HarnessSpec] = {}
    served = {}
    for row in rows:
        if row.harness is not None and row.harness.pk not in specs:
            specs[row.harness.pk] = harness_spec(row.harness)
        served[str(row.number)] = VersionServing(
            backend_version=str(row.weights_of.number) if row.weights_of is not None else str(row.number),
            harness=specs.get(row.harness.pk) if row.harness is not None else None,
            harness_agent=row.harness.agent_name if row.harness is not None else "",
        )
    now = time.monotonic()
    return _ModelServing(
        expires=now + settings.AREAL_ROUTING_CACHE_SECONDS,
        reload_after=now + MISSING_RELOAD_SECONDS,
        highest=model_version_highest_number(tenant_id=tenant_id, name=model),
        versions=served,
    )


def version_serving(*, tenant_id: int, model: str, number: str) -> VersionServing:
    """How version `number` of the tenant's `model` is served (one read of the model's harnessed versions
    per routing-cache period and process); a version string that names no harnessed version, such as a
    backend's own reported version, is served by itself without a harness."""
    cached = version_serving_cached(tenant_id=tenant_id, model=model, number=number)
    if cached is not None:
        return cached
    if len(_serving) > 10_000:
        _serving.clear()
    entry = _serving[(tenant_id, model)] = _load(tenant_id, model)
    return entry.versions.get(number) or VersionServing(backend_version=number, harness=None)


def harness_for_version(tenant_id: int, model: str, number, agent_name: str = "") -> HarnessSpec | None:
    """The harness the gateway applies to a request of `agent_name` routed to version `number` of `model`
    (None: none, or one for another agent)."""
    return version_serving(tenant_id=tenant_id, model=model, number=str(number)).harness_for(agent_name)


def version_serving_clear() -> None:
    _serving.clear()
