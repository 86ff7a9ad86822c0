"""Reads of the control plane's tables, always within one tenant."""

from typing import TYPE_CHECKING

from django.db.models import Avg, Exists, OuterRef

from apps.core.selectors import get_in_tenant
from apps.evolution.models import (
    OPEN_DECISION_STATUSES,
    Decision,
    EvolutionPolicy,
    HarnessVersion,
    SignalPoint,
    ToolFailureCluster,
)
from apps.qualification.choices import QualificationStatus
from apps.qualification.selectors import qualification_list
from apps.releases.selectors import serving_history
from apps.rewards.selectors import reward_list
from apps.tenants.models import Tenant
from apps.training.choices import VersionStatus
from apps.training.selectors import alias_history, alias_resolve, model_version_list
from apps.trajectories.choices import Purpose
from apps.trajectories.selectors import step_list, trajectory_list
from workers.pii import sanitizer_for

if TYPE_CHECKING:
    from apps.training.models import ModelVersion


def policy_get(*, tenant: Tenant, policy_id) -> EvolutionPolicy:
    return get_in_tenant(EvolutionPolicy, tenant=tenant, code="policy_not_found", pk=policy_id)


def open_decisions(*, tenant: Tenant, policy: EvolutionPolicy):
    """The policy's decisions still waiting or under way (proposed, approved, running), oldest first."""
    return (
        Decision.objects.for_tenant(tenant)
        .filter(policy=policy, status__in=OPEN_DECISION_STATUSES)
        .order_by("created_at", "id")
    )


# ---- what the signals read ------------------------------------------------------------------------------
# Every read is bounded: a window is summarised from at most WINDOW_TRAJECTORY_CAP of its newest trajectories,
# their steps up to STEP_CAP and REWARD_CAP rewards, so a tick costs the same on a busy tenant as on a quiet
# one (the values are then those of the newest traffic; `details` says when a cap was reached).
WINDOW_TRAJECTORY_CAP = 5_000
STEP_CAP = 50_000
REWARD_CAP = 20_000

STEP_FIELDS = (
    "trajectory_id",
    "index",
    "kind",
    "created_at",
    "observation",
    "action",
    "result",
    "state",
    "served_model",
    "latency_ms",
    "cost_usd",
    "pii_entities",
    "error",
    "aborted",
)


def policy_traffic(*, tenant: Tenant, policy: EvolutionPolicy):
    """The tenant's production trajectories of the policy's agent (every agent when its name is blank) with at
    least one step served by the policy's model."""
    served = step_list(tenant=tenant).filter(trajectory=OuterRef("pk"), served_model=policy.model)
    trajectories = trajectory_list(tenant=tenant, purpose=Purpose.PRODUCTION, agent=policy.agent_name or None)
    return trajectories.filter(Exists(served))


def window_trajectories(
    *, tenant: Tenant, policy: EvolutionPolicy, start, end, limit: int = WINDOW_TRAJECTORY_CAP
) -> list[dict]:
    """The policy's traffic active in [start, end) (a step served by its model created then), newest started
    first, at most `limit`: `id`, `task_id`, `started_at`."""
    active = step_list(tenant=tenant).filter(
        trajectory=OuterRef("pk"), served_model=policy.model, created_at__gte=start, created_at__lt=end
    )
    rows = policy_traffic(tenant=tenant, policy=policy).filter(Exists(active))
    return list(rows.values("id", "task_id", "started_at")[:limit])


def first_traffic_at(*, tenant: Tenant, policy: EvolutionPolicy, since):
    """When the policy's first trajectory started at or after `since` (None: none yet)."""
    return (
        policy_traffic(tenant=tenant, policy=policy)
        .filter(started_at__gte=since)
        .order_by("started_at")
        .values_list("started_at", flat=True)
        .first()
    )


def trajectory_rows(*, tenant: Tenant, trajectory_ids, limit: int = WINDOW_TRAJECTORY_CAP) -> list[dict]:
    """`id`, `task_id`, `started_at` of the tenant's trajectories among `trajectory_ids` (at most `limit`);
    ids of other tenants or of deleted rows are left out."""
    ids = list(trajectory_ids)[:limit]
    return list(trajectory_list(tenant=tenant).filter(id__in=ids).values("id", "task_id", "started_at"))


def trajectory_steps(*, tenant: Tenant, trajectory_ids, before, limit: int = STEP_CAP) -> list[dict]:
    """The steps (STEP_FIELDS) of those trajectories created before `before`, in trajectory and index order,
    at most `limit` (the newest trajectories' steps are kept when the cap is reached)."""
    steps = step_list(tenant=tenant).filter(trajectory_id__in=list(trajectory_ids), created_at__lt=before)
    newest = steps.order_by("-created_at").values("pk")[:limit]  # a subquery: no id list in the SQL
    kept = step_list(tenant=tenant).filter(pk__in=newest)
    return list(kept.order_by("trajectory_id", "index").values(*STEP_FIELDS))


def window_rewards(
    *, tenant: Tenant, policy: EvolutionPolicy, start, end, limit: int = REWARD_CAP
) -> list[dict]:
    """Rewards created in [start, end) on the policy's traffic, newest first, at most `limit`: `trajectory_id`,
    `value`, `kind`, `source`, `created_at`."""
    rewards = reward_list(tenant=tenant, created_after=start, created_before=end).filter(
        trajectory__in=policy_traffic(tenant=tenant, policy=policy)
    )
    return list(rewards.values("trajectory_id", "value", "kind", "source", "created_at")[:limit])


def production_version(*, tenant: Tenant, model: str) -> "ModelVersion | None":
    """The version the model's `production` alias names, else its newest version in status production."""
    version = alias_resolve(tenant=tenant, name=model, alias="production")
    if version is not None:
        return version
    return model_version_list(tenant=tenant, name=model, status=VersionStatus.PRODUCTION).first()


def promoted_at(*, tenant: Tenant, version: "ModelVersion"):
    """When `version` last became production: the alias move to it, else the first serving event with it as
    the stable version; None when neither is recorded."""
    moves = alias_history(tenant=tenant, name=version.name, alias="production").filter(to_version=version)
    move = moves.order_by("-moved_at", "-id").first()
    if move is not None:
        return move.moved_at
    event = serving_history(tenant=tenant, model=version.name).filter(stable=version).first()
    return event.at if event is not None else None


def newest_version_number(*, tenant: Tenant, model: str) -> int | None:
    newest = model_version_list(tenant=tenant, name=model).first()
    return newest.number if newest is not None else None


def qualified_count(*, tenant: Tenant, policy: EvolutionPolicy, since=None) -> int:
    """Qualified trajectories of the policy's traffic started at or after `since` (all when None)."""
    rows = qualification_list(tenant=tenant, status=QualificationStatus.QUALIFIED).filter(
        trajectory__in=policy_traffic(tenant=tenant, policy=policy)
    )
    if since is not None:
        rows = rows.filter(trajectory__started_at__gte=since)
    return rows.count()


def policy_list(*, tenant: Tenant):
    """The tenant's policies, by model then agent."""
    return EvolutionPolicy.objects.for_tenant(tenant).order_by("model", "agent_name", "id")


def decision_list(*, tenant: Tenant, policy_id=None, status: str | None = None, kind: str | None = None):
    """The tenant's decisions, newest first, optionally of one policy, status or kind."""
    rows = (
        Decision.objects.for_tenant(tenant)
        .select_related("version", "harness")
        .order_by("-created_at", "-id")
    )
    if policy_id is not None:
        rows = rows.filter(policy_id=policy_id)
    if status:
        rows = rows.filter(status=status)
    if kind:
        rows = rows.filter(kind=kind)
    return rows


def dangerously_policies_to_tick():
    """Every tenant's enabled policies (the beat's tick: a system read across tenants), by id."""
    return EvolutionPolicy.objects.filter(enabled=True).select_related("tenant").order_by("id")


def decision_get(*, tenant: Tenant, decision_id) -> Decision:
    return get_in_tenant(
        Decision.objects.select_related("policy", "version", "harness", "parent"),
        tenant=tenant,
        code="decision_not_found",
        pk=decision_id,
    )


def decision_status_in(*, tenant: Tenant, decision_id, statuses) -> bool:
    """Whether the tenant's decision is (still) in one of `statuses`, read afresh."""
    return Decision.objects.for_tenant(tenant).filter(pk=decision_id, status__in=statuses).exists()


def signal_series(*, tenant: Tenant, policy: EvolutionPolicy, name: str | None = None, since=None):
    """The policy's signal points, oldest first, optionally of one signal and from `since` on."""
    rows = SignalPoint.objects.for_tenant(tenant).filter(policy=policy).order_by("at", "id")
    if name:
        rows = rows.filter(name=name)
    if since is not None:
        rows = rows.filter(at__gte=since)
    return rows


def clusters_list(*, tenant: Tenant, policy: EvolutionPolicy):
    """The policy's tool-failure clusters, the most recently seen first."""
    return (
        ToolFailureCluster.objects.for_tenant(tenant)
        .filter(policy=policy)
        .order_by("-last_seen", "-count", "id")
    )


def cluster_list(*, tenant: Tenant, policy_id=None):
    """Tool-failure clusters, the most frequent first."""
    rows = ToolFailureCluster.objects.for_tenant(tenant).order_by("-count", "-last_seen", "id")
    if policy_id is not None:
        rows = rows.filter(policy_id=policy_id)
    return rows


def harness_version_list(*, tenant: Tenant, model: str | None = None):
    """Harness versions, newest first, optionally of one model."""
    rows = HarnessVersion.objects.for_tenant(tenant).order_by("model", "-number")
    if model:
        rows = rows.filter(model=model)
    return rows


def harness_version_get(*, tenant: Tenant, harness_id) -> HarnessVersion:
    return get_in_tenant(HarnessVersion, tenant=tenant, code="harness_version_not_found", pk=harness_id)


def decision_timeline(*, tenant: Tenant, policy: EvolutionPolicy, since_id: int = 0):
    """The policy's decisions, oldest first (after `since_id` when given)."""
    return (
        Decision.objects.for_tenant(tenant)
        .filter(policy=policy, pk__gt=since_id)
        .select_related("version", "parent")
        .order_by("id")
    )


def decisions_in_status(*, tenant: Tenant, policy: EvolutionPolicy, status: str):
    return decision_timeline(tenant=tenant, policy=policy).filter(status=status)


def gate_key(gate: dict) -> str:
    """What identifies one gate's measurement in a version's metrics (the same gate reads the same score)."""
    if gate.get("suite_id"):
        return f"suite:{gate['suite_id']}"
    return f"{gate.get('environment')}:{gate.get('cases')}:{gate.get('seed', 0)}"


def gate_score(version, gate: dict) -> float | None:
    """The score `gate` gave `version` (None when it was not measured by that gate)."""
    row = (version.metrics or {}).get("gate") or {}
    entry = row.get(gate_key(gate))
    return None if entry is None else entry.get("score")


def production_versions(*, tenant: Tenant, model: str) -> list:
    """Every version the model's `production` alias has named, oldest first (the current one last)."""
    from apps.training.selectors import alias_history, alias_resolve

    versions = []
    for move in alias_history(tenant=tenant, name=model, alias="production"):
        if move.to_version not in versions:
            versions.append(move.to_version)
    current = alias_resolve(tenant=tenant, name=model, alias="production")
    if current is not None and current not in versions:
        versions.append(current)
    return versions


def control_state(*, tenant: Tenant, policy: EvolutionPolicy, now=None):
    """The snapshot of everything the rules read (workers.evolution.rules.ControlState) for `policy`."""
    from datetime import timedelta

    from django.db.models import Max
    from django.utils import timezone

    from apps.evolution.models import DecisionKind, ToolFailureCluster
    from apps.releases.choices import ACTIVE_STATUSES, ReleaseStatus
    from apps.releases.selectors import release_list
    from apps.training.online import online_run_active, online_run_periods
    from apps.training.selectors import alias_history
    from workers.evolution.rules import ClusterView, ControlState, ReleaseView

    now = now or timezone.now()

    learner = online_run_active(tenant=tenant)
    if learner is not None and learner.model_name != policy.model:
        learner = None
    decisions = Decision.objects.for_tenant(tenant).filter(policy=policy)
    last_evaluated = (
        decisions.filter(kind=DecisionKind.EVALUATE, version__isnull=False)
        .aggregate(number=Max("version__number"))
        .get("number")
    )
    production = production_versions(tenant=tenant, model=policy.model)
    scores = [
        score for score in (gate_score(version, policy.gate) for version in production) if score is not None
    ]
    promotions = alias_history(tenant=tenant, name=policy.model, alias="production").order_by("-moved_at")
    # A promotion replaces a version; the alias's first assignment (the base) is not one.
    last_promotion = promotions.filter(from_version__isnull=False).first()
    releases = release_list(tenant=tenant, model=policy.model)
    under_way = releases.filter(status__in=ACTIVE_STATUSES).order_by("-id").first()
    ours = {
        release_id
        for started in decisions.filter(kind=DecisionKind.RELEASE).values_list("started", flat=True)
        for release_id in (started or {}).get("releases", [])
    }
    ended = (
        releases.filter(pk__in=ours)
        .filter(status__in=(ReleaseStatus.PROMOTED, ReleaseStatus.ROLLED_BACK, ReleaseStatus.ABORTED))
        .order_by("-finished_at", "-id")
        .first()
    )
    if (
        ended is not None
        and decisions.filter(kind=DecisionKind.RESTART_LEARNER, evidence__release=ended.pk).exists()
    ):
        ended = None
    latest = decisions.order_by().values("kind").annotate(at=Max("created_at"))
    day_start = now.replace(hour=0, minute=0, second=0, microsecond=0)
    used = sum(
        ((finished or now) - started).total_seconds()
        for started, finished in online_run_periods(tenant=tenant, model=policy.model, since=day_start)
    )
    clusters = ToolFailureCluster.objects.for_tenant(tenant).filter(
        policy=policy, last_seen__gte=now - timedelta(seconds=policy.window_seconds)
    )
    return ControlState(
        now=now.timestamp(),
        learner_running=learner is not None,
        learner_version=learner.current_version.number if learner else None,
        learner_base=learner.base_version.number if learner else None,
        last_evaluated=last_evaluated,
        production_version=production[-1].number if production else None,
        production_score=gate_score(production[-1], policy.gate) if production else None,
        best_production_score=max(scores) if scores else None,
        last_promotion_at=last_promotion.moved_at.timestamp() if last_promotion else None,
        release=(
            ReleaseView(id=under_way.pk, status=under_way.status, candidate=under_way.candidate.number)
            if under_way
            else None
        ),
        release_ended=(
            ReleaseView(id=ended.pk, status=ended.status, candidate=ended.candidate.number) if ended else None
        ),
        open_kinds=frozenset(open_decisions(tenant=tenant, policy=policy).values_list("kind", flat=True)),
        since_last={row["kind"]: (now - row["at"]).total_seconds() for row in latest},
        compute_used_seconds=used,
        clusters=tuple(
            ClusterView(
                id=cluster.pk,
                tool=cluster.tool,
                signature=cluster.signature,
                count=cluster.count,
                first_seen=cluster.first_seen.timestamp(),
                last_seen=cluster.last_seen.timestamp(),
            )
            for cluster in clusters
        ),
        harness_allowed="harness" in (policy.update_kinds or []),
        weights_allowed="weights" in (policy.update_kinds or []),
    )


def _conversation(step: dict) -> list[dict]:
    """The messages of a recorded step followed by the answer it recorded (what a memory exemplar shows)."""
    messages = list((step.get("observation") or {}).get("messages") or [])
    action = step.get("action") or {}
    answer = {"role": "assistant", "content": action.get("content") or ""}
    if action.get("tool_calls"):
        answer["tool_calls"] = action["tool_calls"]
    return [*messages, answer]


SUCCESS_REWARD = 0.5  # a trajectory whose mean reward reaches it succeeded (as the task_success signal)


def harness_inputs(*, tenant: Tenant, policy: EvolutionPolicy, cluster_ids, examples: int = 5):
    """What a harness proposer reads for the most frequent of `cluster_ids`: the cluster as a dict (with
    `offered_tools`, the tools its failing requests offered, and `agent_name`, the policy's agent, whose
    requests the harness will be for), the final conversations of up to `examples` qualified trajectories of
    the policy's traffic that called the failing tool without failing (memory exemplars, each with the
    `trajectory` it quotes), and those of the cluster's example trajectories (failures). A trajectory with a
    step that has PII findings, or whose conversation the built-in PII scan flags, is never an exemplar.
    None when no cluster is left."""
    cluster = (
        ToolFailureCluster.objects.for_tenant(tenant)
        .filter(policy=policy, pk__in=list(cluster_ids))
        .order_by("-count", "id")
        .first()
    )
    if cluster is None:
        return None
    failing_steps = [
        step
        for trajectory_id in cluster.examples[-examples:]
        for step in step_list(tenant=tenant)
        .filter(trajectory_id=trajectory_id)
        .values("observation", "action")
    ]
    offered = sorted(
        {
            (tool.get("function") or {}).get("name", "")
            for step in failing_steps
            for tool in (step["observation"] or {}).get("tools") or []
            if isinstance(tool, dict)
        }
        - {""}
    )
    flagged = (
        step_list(tenant=tenant).filter(trajectory_id=OuterRef("trajectory_id")).exclude(pii_entities=[])
    )
    qualified = (
        qualification_list(tenant=tenant, status=QualificationStatus.QUALIFIED)
        .filter(trajectory__in=policy_traffic(tenant=tenant, policy=policy))
        .exclude(trajectory_id__in=cluster.examples)
        .exclude(Exists(flagged))
        .annotate(reward_mean=Avg("trajectory__rewards__value"))
        .filter(reward_mean__gte=SUCCESS_REWARD)
        .order_by("-trajectory__started_at")
        .values_list("trajectory_id", flat=True)[: examples * 4]
    )
    successes = []
    for trajectory_id in qualified:
        last = (
            step_list(tenant=tenant)
            .filter(trajectory_id=trajectory_id)
            .values("observation", "action")
            .last()
        )
        conversation = _conversation(last) if last else []
        called = {
            (call.get("function") or {}).get("name")
            for message in conversation
            for call in message.get("tool_calls") or []
        }
        if cluster.tool in called and len(conversation) <= 12 and not _personal_data_in(conversation):
            successes.append(
                {
                    "situation": f"{cluster.tool} answered",
                    "messages": conversation,
                    "trajectory": str(trajectory_id),
                }
            )
        if len(successes) >= examples:
            break
    failures = [{"messages": _conversation(step)} for step in failing_steps[-examples:]]
    as_dict = {
        "id": cluster.pk,
        "tool": cluster.tool,
        "kind": cluster.kind,
        "signature": cluster.signature,
        "argument_shape": cluster.argument_shape,
        "count": cluster.count,
        "example_arguments": cluster.example_arguments,
        "offered_tools": offered,
        "agent_name": policy.agent_name,
    }
    return as_dict, successes, failures


def _personal_data_in(conversation: list[dict]) -> bool:
    """Whether the built-in PII scan finds anything in `conversation` (or cannot scan it): a tenant whose
    PII mode is off records no findings, and an exemplar must not carry an end user's contact details."""
    _, entities = sanitizer_for(()).scan_value(conversation)
    return bool(entities)


def harness_inserted_messages(*, tenant: Tenant, model: str) -> dict[str, int]:
    """{harness label: how many messages its exemplars put before an agent's conversation}, for the model's
    harness versions: what drift leaves out, so a harness never looks like a shift of the agent's traffic."""
    return {
        f"h{number}": sum(len(exemplar.get("messages") or []) for exemplar in exemplars)
        for number, exemplars in HarnessVersion.objects.for_tenant(tenant)
        .filter(model=model)
        .values_list("number", "exemplars")
    }
