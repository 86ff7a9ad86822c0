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
    ledger = _Ledger(state.open_kinds)
    safety_names = [name for name in policy.signals if name.startswith(SAFETY_PREFIX)]
    safety = _fired(signals, policy, safety_names)
    _propose_promotion(state, safety, ledger)  # 1
    _propose_restart_after_rollback(policy, state, ledger)  # 2
    _propose_tool_failure_fix(signals, policy, state, ledger)  # 3
    _propose_safety_response(state, safety, ledger)  # 6, before 4 and 5, which it holds back
    _propose_training(signals, policy, state, safety, ledger)  # 4
    _propose_evaluation(policy, state, safety, ledger)  # 5
    return ledger.proposals


class _Ledger:
    """This call's proposals, and the kinds taken: a decision open, or proposed already by this call."""

    def __init__(self, open_kinds):
        self.proposals: list[Proposal] = []
        self.taken = set(open_kinds)

    def propose(self, proposal: Proposal) -> None:
        if proposal.kind not in self.taken:
            self.taken.add(proposal.kind)
            self.proposals.append(proposal)


def _propose_promotion(state: ControlState, safety: dict, ledger: _Ledger) -> None:
    """1. A release awaiting approval is promoted (never while a safety signal fires)."""
    release = state.release
    if release is not None and release.status == "awaiting_approval" and not safety:
        ledger.propose(
            Proposal(
                "promote",
                f"release {release.id} (v{release.candidate}) passed its canary",
                {"release": release.id, "candidate": release.candidate},
                version=release.candidate,
                release=release.id,
            )
        )


def _propose_restart_after_rollback(policy: PolicyView, state: ControlState, ledger: _Ledger) -> None:
    """2. A release its guardrails rolled back: the rollback recorded as done, the learner restarted from
    production."""
    ended = state.release_ended
    if (
        ended is None
        or ended.status != "rolled_back"
        or "weights" not in policy.update_kinds
        or "restart_learner" in ledger.taken
    ):
        return
    evidence = {"release": ended.id, "candidate": ended.candidate, "release_status": ended.status}
    # The rollback itself was the release's guardrails' (apps.releases): it goes on the timeline as done.
    ledger.propose(
        Proposal(
            "rollback",
            f"release {ended.id} (v{ended.candidate}) failed its canary's guardrails and was rolled back",
            dict(evidence),
            release=ended.id,
            done=True,
        )
    )
    ledger.propose(
        Proposal(
            "restart_learner",
            f"release {ended.id} (v{ended.candidate}) was rolled back; the learner starts again from "
            f"production v{state.production_version}",
            dict(evidence),
            release=ended.id,
        )
    )


def _propose_tool_failure_fix(
    signals: dict, policy: PolicyView, state: ControlState, ledger: _Ledger
) -> None:
    """3. New tool-failure clusters while `tool_failure_rate` fired: a harness update where harness updates
    are allowed (unless one is cooling down), else a rollback when the failing began after the last
    promotion."""
    tool = _fired(signals, policy, [TOOL_FAILURE_SIGNAL])
    failing = _new_failing_clusters(policy, state)
    if not tool or not failing or (state.harness_allowed and _harness_cooling(policy, state, ledger.taken)):
        return
    clusters = sorted(failing, key=lambda cluster: -cluster.count)
    evidence = {
        "signals": tool,
        "clusters": [cluster.id for cluster in clusters],
        "tools": sorted({cluster.tool for cluster in clusters}),
    }
    top = clusters[0]
    release = state.release
    if state.harness_allowed:
        ledger.propose(
            Proposal(
                "update_harness",
                f"{top.tool} fails ({top.signature}, {top.count} in the window): {_describe(tool)}",
                evidence,
            )
        )
    elif (
        state.last_promotion_at is not None and min(c.first_seen for c in clusters) > state.last_promotion_at
    ):
        ledger.propose(
            Proposal(
                "rollback",
                f"{top.tool} began failing after the last promotion: {_describe(tool)}",
                {**evidence, "release": release.id if release else None},
                release=release.id if release else None,
            )
        )


def _new_failing_clusters(policy: PolicyView, state: ControlState) -> list[ClusterView]:
    """The clusters first seen within the last NEW_CLUSTER_WINDOWS windows. After a harness update only
    failures seen since then count (the window still holds older ones)."""
    harness_since = state.since_last.get("update_harness")
    new_since = state.now - NEW_CLUSTER_WINDOWS * policy.window_seconds
    failing = [cluster for cluster in state.clusters if cluster.first_seen >= new_since]
    return [
        cluster
        for cluster in failing
        if harness_since is None
        or (cluster.last_seen if cluster.last_seen is not None else state.now) > state.now - harness_since
    ]


def _harness_cooling(policy: PolicyView, state: ControlState, taken: set) -> bool:
    """Whether no harness update may be proposed now: within the cool-down of the last one; while a harness
    candidate is still on its way (evaluated or released), so another one does not follow it; or before
    production has served a whole window since its last promotion (until then the window mixes the versions
    before it, and their failures are not production's)."""
    harness_since = state.since_last.get("update_harness")
    promoted_within_window = (
        state.last_promotion_at is not None and state.now - state.last_promotion_at < policy.window_seconds
    )
    return (
        (harness_since is not None and harness_since < policy.cooldown_seconds)
        or promoted_within_window
        or bool(state.release is not None or {"evaluate", "release", "promote"} & taken)
    )


def _propose_safety_response(state: ControlState, safety: dict, ledger: _Ledger) -> None:
    """6. A fired safety signal rolls back the release under way, or else pauses a running learner."""
    if not safety:
        return
    release = state.release
    if release is not None:
        ledger.propose(
            Proposal(
                "rollback",
                f"safety signal during release {release.id}: {_describe(safety)}",
                {"signals": safety, "release": release.id},
                release=release.id,
            )
        )
    elif state.learner_running:
        ledger.propose(Proposal("pause_learning", f"safety signal: {_describe(safety)}", {"signals": safety}))


def _propose_training(
    signals: dict, policy: PolicyView, state: ControlState, safety: dict, ledger: _Ledger
) -> None:
    """4. A fired training signal and no learner running: train, or a `nothing` naming what holds it back
    (the cool-down since the last training or restart, the daily compute budget)."""
    training_names = [
        name for name in policy.signals if name != TOOL_FAILURE_SIGNAL and not name.startswith(SAFETY_PREFIX)
    ]
    training = _fired(signals, policy, training_names)
    learner_kinds = {"train", "restart_learner"}
    if (
        not training
        or safety
        or state.learner_running
        or "weights" not in policy.update_kinds
        or learner_kinds & ledger.taken
    ):
        return
    since = min((state.since_last.get(kind, float("inf")) for kind in learner_kinds), default=float("inf"))
    evidence = {"signals": training}
    if since < policy.cooldown_seconds:
        ledger.propose(
            Proposal(
                "nothing",
                f"training held back by the cool-down ({since:.0f}s of {policy.cooldown_seconds:g}s): "
                f"{_describe(training)}",
                {**evidence, "held_back_by": "cooldown"},
            )
        )
    elif state.compute_used_seconds >= policy.compute_budget_seconds:
        ledger.propose(
            Proposal(
                "nothing",
                f"training held back by the daily compute budget ({state.compute_used_seconds:.0f}s of "
                f"{policy.compute_budget_seconds:g}s used): {_describe(training)}",
                {**evidence, "held_back_by": "compute_budget"},
            )
        )
    else:
        ledger.propose(Proposal("train", f"signals fired: {_describe(training)}", evidence))


def _propose_evaluation(policy: PolicyView, state: ControlState, safety: dict, ledger: _Ledger) -> None:
    """5. A running learner with `evaluate_every` new versions since the last evaluation (or its base), no
    release under way and no safety signal: evaluate its newest version."""
    if (
        not state.learner_running
        or safety
        or state.release is not None
        or state.learner_version is None
        or {"release", "restart_learner", "pause_learning"} & ledger.taken
    ):
        return
    since_version = max(
        number for number in (state.last_evaluated, state.learner_base, -1) if number is not None
    )
    new = state.learner_version - since_version
    if new >= max(policy.evaluate_every, 1):
        ledger.propose(
            Proposal(
                "evaluate",
                f"the learner has {new} new version(s) since v{since_version}: evaluate v{state.learner_version}",
                {"version": state.learner_version, "since": since_version, "every": policy.evaluate_every},
                version=state.learner_version,
            )
        )
