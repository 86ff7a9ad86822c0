"""The control plane's rules: from the signals, the policy and a snapshot of the state, what to propose.

Pure (no Django): apps.loop.control builds `PolicyView` and `ControlState` from the database, calls
`decide`, and records each `Proposal` as a decision. The rules, in order:

1. a release awaiting approval → promote it;
2. a release its guardrails just rolled back → restart the learner from production;
3. a new tool-failure cluster (first seen within the last NEW_CLUSTER_WINDOWS windows: a fault, not the
   agent's chronic mistakes) while `tool_failure_rate` fired → update the harness (when harness updates are
   allowed), else roll back when the failing began after the last promotion;
4. a fired training signal (drift, corrections, thumbs-down, reward...) and no learner running → train,
   unless the cool-down or the daily compute budget holds it back (then a `nothing` saying which);
5. a running learner with `evaluate_every` new versions since the last evaluation, no release under way →
   evaluate its newest version;
6. a fired safety signal (a name starting with `safety`) → roll back the release under way, or pause the
   learner after one; while it fires nothing trains or is evaluated.

A signal fires when its value is known and on the wrong side of its threshold (`op` ">" or "<"). Training
signals are every signal the policy names except `tool_failure_rate` and the safety ones. No proposal repeats
a kind that has a decision open (proposed, approved or running) or another proposal of this call.
"""

from dataclasses import dataclass, field

TOOL_FAILURE_SIGNAL = "tool_failure_rate"
SAFETY_PREFIX = "safety"
NEW_CLUSTER_WINDOWS = 2


@dataclass(frozen=True)
class PolicyView:
    mode: str = "auto"
    signals: dict = field(default_factory=dict)  # {name: {"op": ">" | "<", "threshold": x}}
    update_kinds: tuple = ("weights",)
    evaluate_every: int = 2  # versions of the learner between evaluations
    cooldown_seconds: float = 300.0  # between two trainings
    compute_budget_seconds: float = 3600.0  # training seconds per day
    window_seconds: float = 600.0  # the signals' window


@dataclass(frozen=True)
class ReleaseView:
    id: int
    status: (
        str  # a release under way: draft, evaluating, canary, paused, awaiting_approval; ended: the outcome
    )
    candidate: int  # its candidate's version number


@dataclass(frozen=True)
class ClusterView:
    id: int
    tool: str
    signature: str
    count: int  # failures in the window
    first_seen: float  # seconds, on the clock of ControlState.now
    last_seen: float | None = None  # seconds, same clock (None: unknown, taken as now)


@dataclass(frozen=True)
class ControlState:
    now: float = 0.0  # seconds (any clock shared by the other times here)
    learner_running: bool = False
    learner_version: int | None = None  # the running learner's newest version number
    learner_base: int | None = None  # the version it started from
    last_evaluated: int | None = None  # the newest version number an evaluation was decided for
    production_version: int | None = None
    production_score: float | None = None  # its gate score
    best_production_score: float | None = None  # the best gate score production has had
    last_promotion_at: float | None = None
    release: ReleaseView | None = None  # the release under way
    release_ended: ReleaseView | None = None  # the last release that ended and no decision answered yet
    open_kinds: frozenset = frozenset()
    since_last: dict = field(default_factory=dict)  # {kind: seconds since the last decision of that kind}
    compute_used_seconds: float = 0.0  # training seconds used today
    clusters: tuple = ()  # active ClusterView
    harness_allowed: bool = False
    weights_allowed: bool = True


@dataclass(frozen=True)
class Proposal:
    kind: str
    reason: str
    evidence: dict = field(default_factory=dict)
    version: int | None = None  # the version it is about (evaluate: the learner's newest)
    release: int | None = None  # the release it is about (promote, rollback)
    done: bool = False  # carried out already (by the release's own guardrails): recorded as succeeded


def fired(value: float | None, rule: dict) -> bool:
    """Whether `value` is on the wrong side of `rule`'s threshold (never when the window had no data)."""
    if value is None or not isinstance(rule, dict) or "threshold" not in rule:
        return False
    threshold = float(rule["threshold"])
    return value < threshold if rule.get("op") == "<" else value > threshold


def _fired(signals: dict, policy: PolicyView, names) -> dict:
    """{name: {"value", "op", "threshold"}} of the named signals that fired."""
    evidence = {}
    for name in names:
        rule = policy.signals.get(name) or {}
        value = signals.get(name)
        if fired(value, rule):
            evidence[name] = {"value": value, "op": rule.get("op", ">"), "threshold": rule["threshold"]}
    return evidence


def _describe(fired_signals: dict) -> str:
    return ", ".join(
        f"{name} {row['value']:.3g} {row['op']} {row['threshold']:g}" for name, row in fired_signals.items()
    )


def decide(signals: dict[str, float | None], policy: PolicyView, state: ControlState) -> list[Proposal]:
    """The proposals for this tick (see the module's docstring for the rules and their order)."""
    proposals: list[Proposal] = []
    taken = set(state.open_kinds)

    def propose(proposal: Proposal) -> None:
        if proposal.kind not in taken:
            taken.add(proposal.kind)
            proposals.append(proposal)

    safety_names = [name for name in policy.signals if name.startswith(SAFETY_PREFIX)]
    safety = _fired(signals, policy, safety_names)
    release = state.release

    # 1. A release awaiting approval.
    if release is not None and release.status == "awaiting_approval" and not safety:
        propose(
            Proposal(
                "promote",
                f"release {release.id} (v{release.candidate}) passed its canary",
                {"release": release.id, "candidate": release.candidate},
                version=release.candidate,
                release=release.id,
            )
        )
    # 2. A release its guardrails rolled back.
    ended = state.release_ended
    if (
        ended is not None
        and ended.status == "rolled_back"
        and "weights" in policy.update_kinds
        and "restart_learner" not in taken
    ):
        # The rollback itself was the release's guardrails' (apps.releases): it goes on the timeline as done.
        propose(
            Proposal(
                "rollback",
                f"release {ended.id} (v{ended.candidate}) failed its canary's guardrails and was rolled back",
                {"release": ended.id, "candidate": ended.candidate, "release_status": ended.status},
                release=ended.id,
                done=True,
            )
        )
        propose(
            Proposal(
                "restart_learner",
                f"release {ended.id} (v{ended.candidate}) was rolled back; the learner starts again from "
                f"production v{state.production_version}",
                {"release": ended.id, "candidate": ended.candidate, "release_status": ended.status},
                release=ended.id,
            )
        )
    # 3. Tool failures.
    tool = _fired(signals, policy, [TOOL_FAILURE_SIGNAL])
    # After a harness update only failures seen since then count (the window still holds older ones), and
    # none is proposed within the cool-down of the last one.
    harness_since = state.since_last.get("update_harness")
    new_since = state.now - NEW_CLUSTER_WINDOWS * policy.window_seconds
    failing = [cluster for cluster in state.clusters if cluster.first_seen >= new_since]
    failing = [
        cluster
        for cluster in failing
        if harness_since is None
        or (cluster.last_seen if cluster.last_seen is not None else state.now) > state.now - harness_since
    ]
    # A harness candidate still on its way (evaluated or released) is not followed by another one; nor is
    # one proposed before production has served a whole window since its last promotion (until then the
    # window mixes the versions before it, and their failures are not production's).
    promoted_within_window = (
        state.last_promotion_at is not None and state.now - state.last_promotion_at < policy.window_seconds
    )
    harness_cooling = (
        (harness_since is not None and harness_since < policy.cooldown_seconds)
        or promoted_within_window
        or bool(release is not None or {"evaluate", "release", "promote"} & taken)
    )
    if tool and failing and not (state.harness_allowed and harness_cooling):
        clusters = sorted(failing, key=lambda cluster: -cluster.count)
        evidence = {
            "signals": tool,
            "clusters": [cluster.id for cluster in clusters],
            "tools": sorted({cluster.tool for cluster in clusters}),
        }
        top = clusters[0]
        if state.harness_allowed:
            propose(
                Proposal(
                    "update_harness",
                    f"{top.tool} fails ({top.signature}, {top.count} in the window): {_describe(tool)}",
                    evidence,
                )
            )
        elif (
            state.last_promotion_at is not None
            and min(c.first_seen for c in clusters) > state.last_promotion_at
        ):
            propose(
                Proposal(
                    "rollback",
                    f"{top.tool} began failing after the last promotion: {_describe(tool)}",
                    {**evidence, "release": release.id if release else None},
                    release=release.id if release else None,
                )
            )
    # 6 (before 4 and 5, which it holds back). A safety signal.
    if safety:
        if release is not None:
            propose(
                Proposal(
                    "rollback",
                    f"safety signal during release {release.id}: {_describe(safety)}",
                    {"signals": safety, "release": release.id},
                    release=release.id,
                )
            )
        elif state.learner_running:
            propose(Proposal("pause_learning", f"safety signal: {_describe(safety)}", {"signals": safety}))
    # 4. Training signals.
    training_names = [
        name for name in policy.signals if name != TOOL_FAILURE_SIGNAL and not name.startswith(SAFETY_PREFIX)
    ]
    training = _fired(signals, policy, training_names)
    learner_kinds = {"train", "restart_learner"}
    if (
        training
        and not safety
        and not state.learner_running
        and "weights" in policy.update_kinds
        and not (learner_kinds & taken)
    ):
        since = min(
            (state.since_last.get(kind, float("inf")) for kind in learner_kinds), default=float("inf")
        )
        evidence = {"signals": training}
        if since < policy.cooldown_seconds:
            propose(
                Proposal(
                    "nothing",
                    f"training held back by the cool-down ({since:.0f}s of {policy.cooldown_seconds:g}s): "
                    f"{_describe(training)}",
                    {**evidence, "held_back_by": "cooldown"},
                )
            )
        elif state.compute_used_seconds >= policy.compute_budget_seconds:
            propose(
                Proposal(
                    "nothing",
                    f"training held back by the daily compute budget ({state.compute_used_seconds:.0f}s of "
                    f"{policy.compute_budget_seconds:g}s used): {_describe(training)}",
                    {**evidence, "held_back_by": "compute_budget"},
                )
            )
        else:
            propose(Proposal("train", f"signals fired: {_describe(training)}", evidence))
    # 5. The learner's newest version.
    if (
        state.learner_running
        and not safety
        and release is None
        and state.learner_version is not None
        and not ({"release", "restart_learner", "pause_learning"} & taken)
    ):
        since_version = max(
            number for number in (state.last_evaluated, state.learner_base, -1) if number is not None
        )
        new = state.learner_version - since_version
        if new >= max(policy.evaluate_every, 1):
            propose(
                Proposal(
                    "evaluate",
                    f"the learner has {new} new version(s) since v{since_version}: evaluate v"
                    f"{state.learner_version}",
                    {
                        "version": state.learner_version,
                        "since": since_version,
                        "every": policy.evaluate_every,
                    },
                    version=state.learner_version,
                )
            )
    return proposals
