"""Reads of the control plane's tables, always within one tenant."""

from apps.core.selectors import get_in_tenant
from apps.evolution.models import OPEN_DECISION_STATUSES, Decision, EvolutionPolicy
from apps.tenants.models import Tenant


def policy_get(*, tenant: Tenant, policy_id) -> EvolutionPolicy:
    return get_in_tenant(EvolutionPolicy, tenant=tenant, code="policy_not_found", pk=policy_id)


def open_decisions(*, tenant: Tenant, policy: EvolutionPolicy):
    """The policy's decisions still waiting or under way (proposed, approved, running), oldest first."""
    return (
        Decision.objects.for_tenant(tenant)
        .filter(policy=policy, status__in=OPEN_DECISION_STATUSES)
        .order_by("created_at", "id")
    )


def dangerously_policies_to_tick():
    """Every tenant's enabled policies (the beat's tick: a system read across tenants), by id."""
    return EvolutionPolicy.objects.filter(enabled=True).select_related("tenant").order_by("id")


def decision_get(*, tenant: Tenant, decision_id) -> Decision:
    return get_in_tenant(
        Decision.objects.select_related("policy", "version", "parent"),
        tenant=tenant,
        code="decision_not_found",
        pk=decision_id,
    )


def decision_list(*, tenant: Tenant, policy: EvolutionPolicy, since_id: int = 0):
    """The policy's decisions, oldest first (after `since_id` when given)."""
    return (
        Decision.objects.for_tenant(tenant)
        .filter(policy=policy, pk__gt=since_id)
        .select_related("version", "parent")
        .order_by("id")
    )


def decisions_in_status(*, tenant: Tenant, policy: EvolutionPolicy, status: str):
    return decision_list(tenant=tenant, policy=policy).filter(status=status)


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
    from apps.releases.models import ACTIVE_STATUSES, Release, ReleaseStatus
    from apps.training.models import OnlineRun
    from apps.training.online import online_run_active
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
    last_promotion = promotions.first()
    releases = Release.objects.for_tenant(tenant).filter(model=policy.model).select_related("candidate")
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
        for started, finished in OnlineRun.objects.filter(
            tenant=tenant, model_name=policy.model, started_at__gte=day_start
        ).values_list("started_at", "finished_at")
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
            )
            for cluster in clusters
        ),
        harness_allowed="harness" in (policy.update_kinds or []),
        weights_allowed="weights" in (policy.update_kinds or []),
    )
