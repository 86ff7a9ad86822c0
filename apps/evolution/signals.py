"""The signals of one policy over its sliding window: read the window (selectors), compute each signal with
workers.evolution, store one SignalPoint per signal, upsert the ToolFailureClusters, publish on the
`evolution` stream. The formulas and their defaults are documented in workers.evolution.signals.SIGNALS.

Tool calls and their results, as the gateway records them: an assistant step's `action.tool_calls` holds
the calls (`id`, `function.name`, `function.arguments`); their results come back as `role: tool` messages
(`tool_call_id`, `content`) in a later step's `observation.messages` (the agent re-sends its whole history,
so a result is counted once, at the first step that carries it), or in `result.tool_results` of imported
ATDP records."""

import json
from collections import defaultdict
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from apps.evolution import selectors
from apps.evolution.models import EvolutionPolicy, SignalPoint, ToolFailureCluster
from apps.metrics.publish import metrics_publish
from apps.tenants.models import Tenant
from workers.evolution.clusters import (
    MAX_EXAMPLE_ARGUMENTS,
    MAX_EXAMPLES,
    ToolEvent,
    cluster,
    event_key,
    failure_signature,
    is_malformed,
    merge_examples,
)
from workers.evolution.drift import TrafficSample, drift
from workers.evolution.harness import TOOL_NAME
from workers.evolution.signals import SIGNALS, SUCCESS_CUT, mean, per_hundred, rate, share_at_least, trend
from workers.stats import percentile

STREAM = "evolution"
REFUSAL_REASONS = {"content_filter", "refusal"}
OTHER_TOOLS = "<other>"  # in `by_tool`: calls whose name is no tool name
GUARDRAIL_WORDS = ("pii", "guardrail", "blocked", "content filter", "content_filter", "moderation")


def signals_compute(*, tenant: Tenant, policy: EvolutionPolicy, now=None) -> dict[str, float | None]:
    """Computes every signal of `policy` over its window ending at `now`, stores one SignalPoint per signal,
    upserts the ToolFailureClusters, publishes them on the `evolution` stream and returns {name: value}.

    Tenancy: every read is the tenant's (another tenant's traffic never counts). Idempotency: a cluster's
    count only grows by events newer than its `last_seen`, so ticks over overlapping windows do not count an
    event twice (an event recorded late, older than the cluster's `last_seen`, is not counted). Locking: the
    policy's clusters are locked while they are upserted. Publishes on commit."""
    now = now or timezone.now()
    start = now - timedelta(seconds=policy.window_seconds)
    window = selectors.window_trajectories(tenant=tenant, policy=policy, start=start, end=now)
    ids = [row["id"] for row in window]
    steps = selectors.trajectory_steps(tenant=tenant, trajectory_ids=ids, before=now)
    rewards = selectors.window_rewards(tenant=tenant, policy=policy, start=start, end=now)
    events = [event for event in tool_events(steps) if event.at >= start]
    window_steps = [step for step in steps if step["created_at"] >= start]
    computed = _reward_signals(rewards)
    successes = computed["task_success"][1].get("successes", 0)
    computed.update(_step_signals(window_steps, policy=policy, trajectories=len(window), successes=successes))
    computed["tool_failure_rate"] = _tool_failure_rate(events)
    production = selectors.production_version(tenant=tenant, model=policy.model)
    computed["drift_js"] = _drift(
        tenant=tenant, policy=policy, production=production, current=(window, steps)
    )
    computed.update(_version_signals(tenant=tenant, policy=policy, production=production))
    for details in (computed["safety_events"][1], computed["tool_failure_rate"][1]):
        details["capped"] = len(window) >= selectors.WINDOW_TRAJECTORY_CAP
    values = {name: computed[name][0] for name in SIGNALS}
    with transaction.atomic():
        SignalPoint.objects.bulk_create(
            SignalPoint(
                tenant=tenant,
                policy=policy,
                name=name,
                value=values[name],
                window_seconds=policy.window_seconds,
                details=computed[name][1],
                at=now,
            )
            for name in SIGNALS
        )
        signal_points_prune(tenant=tenant, policy=policy)
        changed = clusters_upsert(tenant=tenant, policy=policy, events=events)
        payload = {"type": "signals", "policy": policy.pk, "at": now.isoformat(), "values": values}
        metrics_publish(tenant_id=tenant.pk, stream=STREAM, payload=payload)
        for row in changed:
            metrics_publish(tenant_id=tenant.pk, stream=STREAM, payload=cluster_payload(row))
    return values


# ---- bounded history, and what goes with the traffic it quotes -----------------------------------------

SIGNAL_POINTS_KEPT = 2880  # per policy and signal: a day of ticks every 30 s (the charts read the newest)


def signal_points_prune(*, tenant: Tenant, policy: EvolutionPolicy, keep: int | None = None) -> int:
    """Deletes the policy's signal points beyond the newest `keep` (SIGNAL_POINTS_KEPT) of each signal, so the
    series stays bounded however long the policy ticks. Called by every tick, in its transaction (a tick adds
    one point per signal, so each call deletes at most one per signal once the history is full). Returns how
    many points went."""
    keep = SIGNAL_POINTS_KEPT if keep is None else keep
    deleted = 0
    for name in SIGNALS:
        series = SignalPoint.objects.filter(tenant=tenant, policy=policy, name=name)
        boundary = list(series.order_by("-at", "-id").values_list("at", "id")[keep : keep + 1])
        if boundary:
            at, point_id = boundary[0]
            deleted += series.filter(Q(at__lt=at) | Q(at=at, id__lte=point_id)).delete()[0]
    return deleted


@transaction.atomic
def evolution_traffic_forget(*, tenant: Tenant, trajectory_ids) -> dict:
    """What the control plane quotes of `trajectory_ids` goes with them (apps.trajectories' retention calls
    this in the transaction that deletes them): the tool-failure clusters that name one as an example lose
    it and their example arguments (which may be its text), and a cluster left with no example is deleted
    (its signature was written from that traffic; the next tick makes it again from live traffic); harness
    exemplars taken from one are removed from their harness (`harness.harness_exemplars_forget`). Signal
    details hold counts and tool names only. Tenancy: only `tenant`'s rows. Idempotent."""
    from apps.evolution.harness_versions import harness_exemplars_forget

    gone = {str(trajectory_id) for trajectory_id in trajectory_ids}
    emptied, trimmed = [], 0
    for row in ToolFailureCluster.objects.for_tenant(tenant).select_for_update().only("id", "examples"):
        kept = [example for example in row.examples if str(example) not in gone]
        if len(kept) == len(row.examples):
            continue
        if not kept:
            emptied.append(row.pk)
            continue
        ToolFailureCluster.objects.filter(pk=row.pk).update(examples=kept, example_arguments=[])
        trimmed += 1
    if emptied:
        ToolFailureCluster.objects.filter(tenant=tenant, pk__in=emptied).delete()
    exemplars = harness_exemplars_forget(tenant=tenant, trajectory_ids=gone)
    return {"clusters_deleted": len(emptied), "clusters_trimmed": trimmed, "harness_exemplars": exemplars}


# ---- tool calls and results ---------------------------------------------------------------------------


def content_text(content) -> str:
    """A message's content as text: a string as it is, a list of parts as their texts joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [part.get("text", "") if isinstance(part, dict) else str(part) for part in content]
        return "\n".join(part for part in parts if part)
    return json.dumps(content, sort_keys=True)


def _result_item_text(item: dict) -> str:
    if item.get("error"):
        return json.dumps({"error": item["error"]})
    for key in ("content", "output", "result"):
        if key in item:
            return content_text(item[key])
    return ""


def tool_events(steps: list[dict]) -> list[ToolEvent]:
    """One event per tool call of the steps (ordered by trajectory and index): its result (the first tool
    message or tool_results item naming its id, timed at the step that carried it) or, for a malformed call
    that got no result, the call itself at its own step's time."""
    by_trajectory: dict = defaultdict(list)
    for step in steps:
        by_trajectory[step["trajectory_id"]].append(step)
    return [
        event
        for trajectory_id, own in by_trajectory.items()
        for event in _trajectory_tool_events(str(trajectory_id), own)
    ]


def _step_results(step: dict):
    """(tool_call_id, result text) of every tool result the step carries."""
    for message in (step["observation"] or {}).get("messages") or []:
        if isinstance(message, dict) and message.get("role") == "tool":
            yield message.get("tool_call_id"), content_text(message.get("content"))
    for item in (step["result"] or {}).get("tool_results") or []:
        if isinstance(item, dict):
            yield item.get("tool_call_id"), _result_item_text(item)


def _step_calls(step: dict):
    """(call id, tool name, arguments as the model wrote them) of every tool call of the step's action."""
    for call in (step["action"] or {}).get("tool_calls") or []:
        if isinstance(call, dict) and call.get("id"):
            function = call.get("function") or {}
            arguments = function.get("arguments")
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments) if arguments is not None else ""
            yield call["id"], function.get("name") or "<unnamed>", arguments


def _trajectory_tool_events(trajectory_id: str, steps: list[dict]) -> list[ToolEvent]:
    calls: dict[str, tuple[str, str, datetime]] = {}
    events: dict[str, ToolEvent] = {}
    for step in steps:
        for call_id, text in _step_results(step):
            if call_id in calls and call_id not in events:
                name, arguments, _ = calls[call_id]
                malformed = is_malformed(arguments)
                events[call_id] = ToolEvent(
                    trajectory_id, name, arguments, text, step["created_at"], malformed
                )
        for call_id, name, arguments in _step_calls(step):
            calls[call_id] = (name, arguments, step["created_at"])
    for call_id, (name, arguments, at) in calls.items():
        if call_id not in events and is_malformed(arguments):
            events[call_id] = ToolEvent(trajectory_id, name, arguments, None, at, malformed=True)
    return list(events.values())


def _tool_failure_rate(events: list[ToolEvent]) -> tuple[float | None, dict]:
    by_tool: dict[str, dict[str, int]] = defaultdict(lambda: {"failed": 0, "results": 0})
    for event in events:
        if event.result_text is None:
            continue
        # a stored detail names a tool only by a tool name (the model's or agent's other text is not kept)
        name = event.tool if TOOL_NAME.match(event.tool) else OTHER_TOOLS
        by_tool[name]["results"] += 1
        if failure_signature(event.result_text) is not None:
            by_tool[name]["failed"] += 1
    failed = sum(counts["failed"] for counts in by_tool.values())
    results = sum(counts["results"] for counts in by_tool.values())
    malformed = sum(1 for event in events if event.malformed)
    details = {"failed": failed, "results": results, "malformed_calls": malformed, "by_tool": dict(by_tool)}
    return rate(failed, results), details


@transaction.atomic
def clusters_upsert(*, tenant: Tenant, policy: EvolutionPolicy, events: list[ToolEvent]) -> list:
    """Adds the failing events to the policy's clusters (creating new ones): an existing cluster only takes
    the events newer than its `last_seen`. Returns the clusters created or changed."""
    existing = {
        (row.tool, row.kind, row.signature, row.argument_shape): row
        for row in ToolFailureCluster.objects.for_tenant(tenant).filter(policy=policy).select_for_update()
    }
    changed = []
    for found in cluster(events):
        row = existing.get(found.key)
        if row is None:
            changed.append(
                ToolFailureCluster.objects.create(
                    tenant=tenant,
                    policy=policy,
                    tool=found.tool[:200],
                    kind=found.kind,
                    signature=found.signature,
                    argument_shape=found.argument_shape,
                    count=found.count,
                    first_seen=found.first_seen,
                    last_seen=found.last_seen,
                    examples=found.examples,
                    example_arguments=found.example_arguments,
                )
            )
            continue
        fresh = [event for event in events if event.at > row.last_seen and event_key(event) == found.key]
        if not fresh:
            continue
        newer = cluster(fresh)[0]
        ToolFailureCluster.objects.filter(pk=row.pk).update(
            count=F("count") + newer.count,
            last_seen=newer.last_seen,
            examples=merge_examples(row.examples, newer.examples, MAX_EXAMPLES),
            example_arguments=merge_examples(
                row.example_arguments, newer.example_arguments, MAX_EXAMPLE_ARGUMENTS
            ),
        )
        row.refresh_from_db()
        changed.append(row)
    return changed


def cluster_payload(row: ToolFailureCluster) -> dict:
    return {
        "type": "cluster",
        "policy": row.policy_id,
        "id": row.pk,
        "tool": row.tool,
        "kind": row.kind,
        "signature": row.signature,
        "argument_shape": row.argument_shape,
        "count": row.count,
        "first_seen": row.first_seen.isoformat(),
        "last_seen": row.last_seen.isoformat(),
        "examples": row.examples,
    }


# ---- rewards --------------------------------------------------------------------------------------------


def _reward_signals(rewards: list[dict]) -> dict[str, tuple[float | None, dict]]:
    user = [reward for reward in rewards if reward["source"] == "user"]
    rewarded_by_users = {reward["trajectory_id"] for reward in user}
    corrected = {reward["trajectory_id"] for reward in user if reward["kind"] == "critique"}
    votes = [reward for reward in user if reward["kind"] == "boolean"]
    down = sum(1 for reward in votes if reward["value"] == 0)
    scored = [reward for reward in rewards if reward["kind"] != "critique"]
    by_source: dict[str, list[float]] = defaultdict(list)
    by_trajectory: dict = defaultdict(list)
    for reward in scored:
        by_source[reward["source"]].append(reward["value"])
        by_trajectory[reward["trajectory_id"]].append(reward["value"])
    trajectory_means = [mean(values) for values in by_trajectory.values()]
    successes = sum(1 for value in trajectory_means if value is not None and value >= SUCCESS_CUT)
    evaluator = by_source.get("evaluator", [])
    return {
        "correction_rate": (
            rate(len(corrected), len(rewarded_by_users)),
            {"corrected": len(corrected), "rewarded_by_users": len(rewarded_by_users)},
        ),
        "thumbs_down_rate": (
            rate(down, len(votes)),
            {"thumbs_down": down, "thumbs_up": len(votes) - down, "votes": len(votes)},
        ),
        "reward_mean": (
            mean(reward["value"] for reward in scored),
            {
                "count": len(scored),
                "by_source": {
                    source: {"mean": mean(values), "count": len(values)}
                    for source, values in by_source.items()
                },
            },
        ),
        "reward_trend": (
            trend([(reward["created_at"].timestamp(), reward["value"]) for reward in scored]),
            {"points": len(scored)},
        ),
        "evaluator_score": (mean(evaluator), {"count": len(evaluator)}),
        "task_success": (
            share_at_least([value for value in trajectory_means if value is not None]),
            {"successes": successes, "rewarded": len(trajectory_means), "cut": SUCCESS_CUT},
        ),
    }


# ---- steps ----------------------------------------------------------------------------------------------


def _safety_kinds(step: dict) -> set[str]:
    kinds = set()
    if step["pii_entities"]:
        kinds.add("pii")
    result, action = step["result"] or {}, step["action"] or {}
    raw_message = action.get("message")
    message: dict = raw_message if isinstance(raw_message, dict) else {}
    if result.get("finish_reason") in REFUSAL_REASONS or message.get("refusal"):
        kinds.add("refusals")
    error = (step["error"] or "").lower()
    if error and any(word in error for word in GUARDRAIL_WORDS):
        kinds.add("guardrail_errors")
    return kinds


def _step_signals(steps: list[dict], *, policy, trajectories: int, successes: int) -> dict:
    latencies = [
        step["latency_ms"]
        for step in steps
        if step["kind"] == "llm_call" and step["served_model"] == policy.model
    ]
    cost = float(sum(step["cost_usd"] or 0 for step in steps))
    safety = {"pii": 0, "refusals": 0, "guardrail_errors": 0}
    flagged = 0
    for step in steps:
        kinds = _safety_kinds(step)
        flagged += bool(kinds)
        for kind in kinds:
            safety[kind] += 1
    return {
        "cost_per_success": (
            cost / successes if successes else None,
            {"cost_usd": round(cost, 6), "successes": successes},
        ),
        "latency_p95_ms": (percentile(latencies, 0.95), {"steps": len(latencies)}),
        "safety_events": (
            per_hundred(flagged, trajectories),
            {**safety, "steps": flagged, "trajectories": trajectories},
        ),
    }


# ---- drift ----------------------------------------------------------------------------------------------


def traffic_samples(
    trajectories: list[dict], steps: list[dict], inserted: dict[str, int] | None = None
) -> list[TrafficSample]:
    """One sample per trajectory: the tools its steps called, the characters of its first prompt's messages,
    its first user message and its task id. What a harness added is left out (the agent's traffic is what
    drifts, not what the gateway shows the model): system messages, and the `inserted[label]` exemplar
    messages that follow them in a step recorded under harness `label`."""
    by_trajectory: dict = defaultdict(list)
    for step in steps:
        by_trajectory[step["trajectory_id"]].append(step)
    samples = []
    for row in trajectories:
        own = sorted(by_trajectory.get(row["id"], []), key=lambda step: step["index"])
        tools = [
            (call.get("function") or {}).get("name") or "<unnamed>"
            for step in own
            for call in (step["action"] or {}).get("tool_calls") or []
            if isinstance(call, dict)
        ]
        messages = (own[0]["observation"] or {}).get("messages") or [] if own else []
        messages = [
            message for message in messages if isinstance(message, dict) and message.get("role") != "system"
        ]
        label = ((own[0].get("state") or {}).get("prompt_version") or "") if own else ""
        messages = messages[(inserted or {}).get(label, 0) :]
        prompt_chars = sum(len(content_text(message.get("content"))) for message in messages)
        first_user: dict = next((message for message in messages if message.get("role") == "user"), {})
        samples.append(
            TrafficSample(tools, prompt_chars, content_text(first_user.get("content")), row["task_id"] or "")
        )
    return samples


def _reference(*, tenant: Tenant, policy: EvolutionPolicy, production) -> tuple[str | None, list, list]:
    """The reference traffic: production's training trajectories (`dataset_snapshot.trajectory_ids`), else the
    traffic of one window before production was promoted, else (production served from before any traffic,
    as a first version does) the first full window of traffic it served, else none."""
    if production is None:
        return None, [], []
    snapshot_ids = (production.dataset_snapshot or {}).get("trajectory_ids") or []
    if snapshot_ids:
        rows = selectors.trajectory_rows(tenant=tenant, trajectory_ids=snapshot_ids)
        if rows:
            steps = selectors.trajectory_steps(
                tenant=tenant, trajectory_ids=[row["id"] for row in rows], before=timezone.now()
            )
            return "training_snapshot", rows, steps
    moment = selectors.promoted_at(tenant=tenant, version=production)
    if moment is None:
        return None, [], []
    window = timedelta(seconds=policy.window_seconds)
    rows = selectors.window_trajectories(tenant=tenant, policy=policy, start=moment - window, end=moment)
    if rows:
        steps = selectors.trajectory_steps(
            tenant=tenant, trajectory_ids=[row["id"] for row in rows], before=moment
        )
        return "before_promotion", rows, steps
    first = selectors.first_traffic_at(tenant=tenant, policy=policy, since=moment)
    if first is None or first + window > timezone.now():
        return None, [], []
    rows = selectors.window_trajectories(tenant=tenant, policy=policy, start=first, end=first + window)
    steps = selectors.trajectory_steps(
        tenant=tenant, trajectory_ids=[row["id"] for row in rows], before=first + window
    )
    return "first_served", rows, steps


def _drift(*, tenant: Tenant, policy: EvolutionPolicy, production, current) -> tuple[float | None, dict]:
    kind, rows, steps = _reference(tenant=tenant, policy=policy, production=production)
    window, window_steps = current
    inserted = selectors.harness_inserted_messages(tenant=tenant, model=policy.model)
    result = drift(traffic_samples(rows, steps, inserted), traffic_samples(window, window_steps, inserted))
    return result.js_max, {
        "reference": kind,
        "reference_size": result.reference_size,
        "current_size": result.current_size,
        "by_feature": result.by_feature,
        "feature_max": result.feature_max,
        "threshold": result.threshold,
    }


# ---- versions -------------------------------------------------------------------------------------------


def _version_signals(*, tenant: Tenant, policy: EvolutionPolicy, production) -> dict:
    newest = selectors.newest_version_number(tenant=tenant, model=policy.model)
    since = selectors.promoted_at(tenant=tenant, version=production) if production is not None else None
    volume = selectors.qualified_count(tenant=tenant, policy=policy, since=since)
    number = production.number if production is not None else None
    return {
        "qualified_volume": (float(volume), {"since": since.isoformat() if since else None}),
        "staleness_versions": (
            float(newest - number) if newest is not None and number is not None else None,
            {"newest": newest, "production": number},
        ),
        "production_version": (
            float(number) if number is not None else None,
            {
                "version_id": production.pk if production else None,
                "label": production.label if production else None,
            },
        ),
    }
