"""workers.evolution.rules.decide: every rule, in order, on CPU (no database)."""

from dataclasses import replace

from workers.evolution.rules import ClusterView, ControlState, PolicyView, ReleaseView, decide, fired

POLICY = PolicyView(
    mode="auto",
    signals={
        "drift": {"op": ">", "threshold": 0.2},
        "thumbs_down_rate": {"op": ">", "threshold": 0.3},
        "reward_mean": {"op": "<", "threshold": 0.5},
        "tool_failure_rate": {"op": ">", "threshold": 0.1},
        "safety_flags": {"op": ">", "threshold": 0.0},
    },
    update_kinds=("weights",),
    evaluate_every=2,
    cooldown_seconds=300,
    compute_budget_seconds=3600,
)
CALM = {
    "drift": 0.05,
    "thumbs_down_rate": 0.1,
    "reward_mean": 0.8,
    "tool_failure_rate": 0.0,
    "safety_flags": 0,
}
IDLE = ControlState(now=10_000, production_version=0, best_production_score=0.4)
RUNNING = replace(IDLE, learner_running=True, learner_version=1, learner_base=0)


def kinds(proposals):
    return [proposal.kind for proposal in proposals]


def test_fired_compares_by_op_and_ignores_missing_values():
    assert fired(0.3, {"op": ">", "threshold": 0.2})
    assert not fired(0.2, {"op": ">", "threshold": 0.2})
    assert fired(0.1, {"op": "<", "threshold": 0.2})
    assert not fired(None, {"op": ">", "threshold": 0.2})
    assert not fired(0.9, {})


def test_stationary_signals_propose_nothing():
    assert decide(CALM, POLICY, IDLE) == []
    assert decide(CALM, POLICY, RUNNING) == []
    assert decide(dict.fromkeys(CALM), POLICY, IDLE) == []


def test_a_fired_training_signal_without_a_learner_trains_with_its_evidence():
    (proposal,) = decide({**CALM, "drift": 0.4, "reward_mean": 0.3}, POLICY, IDLE)
    assert proposal.kind == "train"
    assert proposal.evidence["signals"] == {
        "drift": {"value": 0.4, "op": ">", "threshold": 0.2},
        "reward_mean": {"value": 0.3, "op": "<", "threshold": 0.5},
    }
    assert "drift 0.4 > 0.2" in proposal.reason


def test_training_is_not_proposed_while_a_learner_runs_or_one_is_open_or_weights_are_not_allowed():
    signals = {**CALM, "thumbs_down_rate": 0.5}
    assert decide(signals, POLICY, replace(RUNNING, learner_version=0)) == []
    assert decide(signals, POLICY, replace(IDLE, open_kinds=frozenset({"train"}))) == []
    assert decide(signals, replace(POLICY, update_kinds=("harness",)), IDLE) == []


def test_cool_down_and_budget_hold_training_back_with_a_nothing_saying_which():
    signals = {**CALM, "drift": 0.4}
    (cool,) = decide(signals, POLICY, replace(IDLE, since_last={"train": 100}))
    assert cool.kind == "nothing"
    assert cool.evidence["held_back_by"] == "cooldown"
    (budget,) = decide(signals, POLICY, replace(IDLE, since_last={"train": 400}, compute_used_seconds=3600))
    assert budget.kind == "nothing"
    assert budget.evidence["held_back_by"] == "compute_budget"
    assert kinds(decide(signals, POLICY, replace(IDLE, since_last={"restart_learner": 400}))) == ["train"]


def test_a_learner_is_evaluated_every_n_versions_since_the_last_evaluation():
    assert decide(CALM, POLICY, replace(RUNNING, learner_version=1)) == []
    (proposal,) = decide(CALM, POLICY, replace(RUNNING, learner_version=2))
    assert (proposal.kind, proposal.version) == ("evaluate", 2)
    assert proposal.evidence == {"version": 2, "since": 0, "every": 2}
    assert decide(CALM, POLICY, replace(RUNNING, learner_version=3, last_evaluated=2)) == []
    assert kinds(decide(CALM, POLICY, replace(RUNNING, learner_version=4, last_evaluated=2))) == ["evaluate"]


def test_no_evaluation_during_a_release_or_with_one_open():
    release = ReleaseView(id=7, status="canary", candidate=2)
    assert decide(CALM, POLICY, replace(RUNNING, learner_version=4, release=release)) == []
    for kind in ("evaluate", "release", "restart_learner"):
        state = replace(RUNNING, learner_version=4, open_kinds=frozenset({kind}))
        assert "evaluate" not in kinds(decide(CALM, POLICY, state))


def test_a_release_awaiting_approval_is_promoted_once():
    release = ReleaseView(id=7, status="awaiting_approval", candidate=2)
    (proposal,) = decide(CALM, POLICY, replace(RUNNING, release=release))
    assert (proposal.kind, proposal.release, proposal.version) == ("promote", 7, 2)
    assert decide(CALM, POLICY, replace(RUNNING, release=release, open_kinds=frozenset({"promote"}))) == []


def test_a_rolled_back_release_restarts_the_learner_but_a_promoted_one_does_not():
    ended = ReleaseView(id=7, status="rolled_back", candidate=2)
    rollback, proposal = decide(CALM, POLICY, replace(RUNNING, release_ended=ended))
    assert (rollback.kind, rollback.release, rollback.done) == ("rollback", 7, True)  # the guardrails' act
    assert (proposal.kind, proposal.release, proposal.done) == ("restart_learner", 7, False)
    assert proposal.evidence["release_status"] == "rolled_back"
    open_restart = replace(RUNNING, release_ended=ended, open_kinds=frozenset({"restart_learner"}))
    assert decide(CALM, POLICY, open_restart) == []  # answered already: the rollback is not said again
    promoted = ReleaseView(id=7, status="promoted", candidate=2)
    assert decide(CALM, POLICY, replace(RUNNING, release_ended=promoted)) == []


def test_tool_failures_update_the_harness_when_allowed():
    clusters = (
        ClusterView(id=3, tool="get_weather", signature="timeout", count=9, first_seen=9_000),
        ClusterView(id=4, tool="get_weather", signature="bad city", count=2, first_seen=9_500),
    )
    signals = {**CALM, "tool_failure_rate": 0.3}
    state = replace(IDLE, clusters=clusters, harness_allowed=True, last_promotion_at=8_000)
    (proposal,) = decide(signals, POLICY, state)
    assert proposal.kind == "update_harness"
    assert proposal.evidence["clusters"] == [3, 4]
    assert proposal.evidence["signals"]["tool_failure_rate"]["threshold"] == 0.1
    assert "timeout" in proposal.reason


def test_only_a_new_cluster_is_a_fault_the_agents_chronic_tool_mistakes_are_not():
    old = ClusterView(id=5, tool="get_weather", signature="no station for <s>", count=30, first_seen=1_000)
    signals = {**CALM, "tool_failure_rate": 0.3}
    state = replace(IDLE, clusters=(old,), harness_allowed=True)
    assert decide(signals, POLICY, state) == []  # first seen 9,000 s ago: 15 windows of 600 s
    fresh = replace(old, id=6, first_seen=IDLE.now - 2 * POLICY.window_seconds)
    (proposal,) = decide(signals, POLICY, replace(state, clusters=(old, fresh)))
    assert (proposal.kind, proposal.evidence["clusters"]) == ("update_harness", [6])


def test_tool_failures_roll_back_without_harness_updates_only_when_they_began_after_the_last_promotion():
    clusters = (ClusterView(id=3, tool="get_weather", signature="timeout", count=9, first_seen=9_000),)
    signals = {**CALM, "tool_failure_rate": 0.3}
    after = replace(IDLE, clusters=clusters, last_promotion_at=8_000)
    (proposal,) = decide(signals, POLICY, after)
    assert proposal.kind == "rollback"
    assert proposal.evidence["clusters"] == [3]
    assert decide(signals, POLICY, replace(after, last_promotion_at=9_500)) == []
    assert decide(signals, POLICY, replace(after, last_promotion_at=None)) == []
    # Below its threshold, or without a cluster, nothing.
    assert decide(CALM, POLICY, after) == []
    assert decide(signals, POLICY, replace(after, clusters=())) == []


def test_a_safety_signal_rolls_back_a_release_or_pauses_the_learner_and_holds_the_rest_back():
    signals = {**CALM, "safety_flags": 2, "drift": 0.5}
    release = ReleaseView(id=7, status="awaiting_approval", candidate=2)
    during = decide(signals, POLICY, replace(RUNNING, learner_version=4, release=release))
    assert kinds(during) == ["rollback"]
    assert during[0].release == 7
    assert during[0].evidence["signals"]["safety_flags"]["value"] == 2
    after = decide(signals, POLICY, replace(RUNNING, learner_version=4))
    assert kinds(after) == ["pause_learning"]
    assert decide(signals, POLICY, IDLE) == []  # nothing runs: nothing to stop, and no training


def test_never_two_proposals_of_a_kind():
    release = ReleaseView(id=7, status="canary", candidate=2)
    clusters = (ClusterView(id=3, tool="t", signature="s", count=9, first_seen=9_000),)
    signals = {**CALM, "safety_flags": 1, "tool_failure_rate": 0.5}
    state = replace(RUNNING, release=release, clusters=clusters, last_promotion_at=8_000)
    assert kinds(decide(signals, POLICY, state)) == ["rollback"]


def test_no_second_harness_update_while_one_is_still_on_its_way():
    fresh = ClusterView(id=6, tool="get_weather", signature="offline", count=9, first_seen=IDLE.now - 60)
    signals = {**CALM, "tool_failure_rate": 0.3}
    state = replace(IDLE, clusters=(fresh,), harness_allowed=True)
    assert kinds(decide(signals, POLICY, state)) == ["update_harness"]
    canary = replace(state, release=ReleaseView(id=3, status="canary", candidate=1))
    assert "update_harness" not in kinds(decide(signals, POLICY, canary))
    evaluating = replace(state, open_kinds=frozenset({"evaluate"}))
    assert "update_harness" not in kinds(decide(signals, POLICY, evaluating))


def test_no_harness_update_before_production_served_a_whole_window_since_its_promotion():
    # The bench's tool_failure run: h1 (a route) was promoted, and 3 s later the window still held the
    # baseline arm's failures from the canary: a second update followed for failures that were not h1's.
    fresh = ClusterView(id=6, tool="get_weather", signature="offline", count=12, first_seen=IDLE.now - 90)
    signals = {**CALM, "tool_failure_rate": 0.6}
    promoted = replace(IDLE, clusters=(fresh,), harness_allowed=True, last_promotion_at=IDLE.now - 3)
    window = 60
    policy = replace(POLICY, window_seconds=window)
    assert "update_harness" not in kinds(decide(signals, policy, promoted))
    later = replace(promoted, last_promotion_at=IDLE.now - window - 1)
    assert kinds(decide(signals, policy, later)) == ["update_harness"]
