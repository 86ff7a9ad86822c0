"""GRPO advantages against values worked out by hand (derivations in the comments)."""

import logging
import math

import pytest
import torch

from workers.rl.advantages import (
    GRPOConfig,
    grpo_advantages,
    kl_penalized_rewards,
    kl_penalty,
    turn_discounted_token_advantages,
)

# Group A: rewards 1, 0, 0, 1 -> mean 0.5; squared deviations 4 x 0.25 = 1;
#   unbiased std sqrt(1/3) = 0.5773503, population std 0.5.
# Group B: rewards 2, 4 -> mean 3; squared deviations 1 + 1 = 2; unbiased std sqrt(2), population std 1.
REWARDS = [1.0, 0.0, 0.0, 1.0, 2.0, 4.0]
GROUPS = ["a", "a", "a", "a", "b", "b"]


def test_group_mean_and_unbiased_group_std():
    result = grpo_advantages(REWARDS, GROUPS, GRPOConfig(eps=0.0))
    # a: +-0.5 / 0.5773503 = +-0.8660254 (= sqrt(3)/2); b: -+1 / 1.4142136 = -+0.7071068
    expected = [0.8660254, -0.8660254, -0.8660254, 0.8660254, -0.7071068, 0.7071068]
    assert result.values == pytest.approx(expected, abs=1e-6)
    assert result.fallback_groups == ()


def test_population_std_and_eps():
    result = grpo_advantages(REWARDS, GROUPS, GRPOConfig(std_unbiased=False, eps=0.5))
    # a: 0.5 / (0.5 + 0.5) = 0.5; b: 1 / (1 + 0.5) = 0.6666667
    assert result.values == pytest.approx([0.5, -0.5, -0.5, 0.5, -0.6666667, 0.6666667], abs=1e-6)


def test_leave_one_out_mean_without_std():
    result = grpo_advantages(REWARDS, GROUPS, GRPOConfig(leave_one_out=True, std_level="none"))
    # a, reward 1: baseline (0 + 0 + 1) / 3 = 1/3 -> 2/3; reward 0: baseline 2/3 -> -2/3
    # b, reward 2: baseline 4 -> -2; reward 4: baseline 2 -> +2
    assert result.values == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3, -2.0, 2.0], abs=1e-9)


def test_batch_mean_group_std():
    result = grpo_advantages(REWARDS, GROUPS, GRPOConfig(mean_level="batch", std_level="group", eps=0.0))
    # batch mean 8/6 = 1.3333333; a: (1 - 1.3333333) / 0.5773503 = -0.5773503, (0 - 1.3333) / 0.57735 = -2.3094011
    # b: (2 - 1.3333333) / 1.4142136 = 0.4714045, (4 - 1.3333333) / 1.4142136 = 1.8856181
    expected = [-0.5773503, -2.3094011, -2.3094011, -0.5773503, 0.4714045, 1.8856181]
    assert result.values == pytest.approx(expected, abs=1e-6)


def test_batch_level_mean_and_std():
    result = grpo_advantages(REWARDS, GROUPS, GRPOConfig(mean_level="batch", std_level="batch", eps=0.0))
    # sum of squares 1 + 1 + 4 + 16 = 22; 22 - 6 * (4/3)^2 = 22 - 10.6666667 = 11.3333333; / 5 = 2.2666667;
    # std 1.5055453; (r - 1.3333333) / 1.5055453
    expected = [(r - 4 / 3) / math.sqrt(34 / 15) for r in REWARDS]
    assert expected[0] == pytest.approx(-0.2214037, abs=1e-6)
    assert result.values == pytest.approx(expected, abs=1e-9)


def test_no_normalization_returns_raw_rewards():
    result = grpo_advantages(REWARDS, GROUPS, GRPOConfig(mean_level="none", std_level="none"))
    assert result.values == pytest.approx(REWARDS)


def test_single_sample_group_falls_back_to_batch_baseline_and_warns(caplog):
    rewards = REWARDS + [5.0]
    groups = GROUPS + ["c"]
    with caplog.at_level(logging.WARNING, logger="workers.rl.advantages"):
        result = grpo_advantages(rewards, groups, GRPOConfig(eps=0.0))
    # batch: sum 13, mean 13/7 = 1.8571429; sum of squares 47; 47 - 169/7 = 22.8571429; / 6 = 3.8095238;
    # std 1.9518001; c: 3.1428571 / 1.9518001 = 1.6102351 (not 0: never a silent zero)
    assert result.values[-1] == pytest.approx(1.6102351, abs=1e-6)
    assert result.values[:6] == pytest.approx(
        [0.8660254, -0.8660254, -0.8660254, 0.8660254, -0.7071068, 0.7071068], abs=1e-6
    )
    assert result.fallback_groups == ("c",)
    assert "single sample" in caplog.text
    assert "c" in caplog.text


def test_missing_group_id_is_its_own_group_and_falls_back():
    result = grpo_advantages([1.0, 0.0, 3.0], [None, None, "x"], GRPOConfig(std_level="none"))
    # all three are one-member groups: batch mean 4/3 for each
    assert result.values == pytest.approx([1 - 4 / 3, -4 / 3, 3 - 4 / 3])
    assert len(result.fallback_groups) == 3


def test_single_trajectory_batch_warns(caplog):
    with caplog.at_level(logging.WARNING, logger="workers.rl.advantages"):
        result = grpo_advantages([1.0], ["g"])
    assert result.values == (0.0,)
    assert "single trajectory" in caplog.text


def test_equal_rewards_are_reported_as_zero_std_groups():
    result = grpo_advantages(
        [1.0, 1.0, 0.0, 1.0], ["a", "a", "b", "b"], GRPOConfig(eps=0.0, std_level="none")
    )
    assert result.values == pytest.approx([0.0, 0.0, -0.5, 0.5])
    assert result.zero_std_groups == ("a",)


def test_units_count_a_split_trajectory_once():
    # trajectory t1 (reward 1) was split into two samples; the group is {t1: 1, t2: 0} -> mean 0.5
    result = grpo_advantages(
        [1.0, 1.0, 0.0], ["g", "g", "g"], GRPOConfig(std_level="none"), unit_ids=["t1", "t1", "t2"]
    )
    assert result.values == pytest.approx([0.5, 0.5, -0.5])
    with pytest.raises(ValueError, match="samples of unit 't1' disagree on reward or group"):
        grpo_advantages([1.0, 0.0], ["g", "g"], unit_ids=["t1", "t1"])


def test_stats():
    result = grpo_advantages(REWARDS, GROUPS, GRPOConfig(eps=0.0))
    assert result.reward_mean == pytest.approx(4 / 3)
    assert result.reward_std == pytest.approx(math.sqrt(11.3333333 / 6), abs=1e-6)
    assert result.advantage_mean == pytest.approx(0.0, abs=1e-12)


def test_kl_estimators():
    logp = torch.tensor([-1.0, -2.0])
    ref = torch.tensor([-1.5, -1.0])
    # d = 0.5, -1.0
    assert kl_penalty(logp, ref, "k1").tolist() == pytest.approx([0.5, -1.0])
    assert kl_penalty(logp, ref, "k2").tolist() == pytest.approx([0.125, 0.5])
    # k3 = exp(-d) + d - 1: exp(-0.5) - 0.5 = 0.1065307; exp(1) - 2 = 0.7182818
    assert kl_penalty(logp, ref, "k3").tolist() == pytest.approx([0.1065307, 0.7182818], abs=1e-6)


def test_kl_penalty_folded_into_rewards():
    logp = torch.tensor([-9.0, -1.0, -2.0])  # the first token is context
    ref = torch.tensor([0.0, -1.5, -1.0])
    mask = torch.tensor([0, 1, 1])
    # k1 over generated tokens: 0.5 - 1.0 = -0.5; reward 1 - 0.1 * (-0.5) = 1.05
    assert kl_penalized_rewards([1.0], [logp], [ref], [mask], coef=0.1) == pytest.approx((1.05,))
    # k3 mean: (0.1065307 + 0.7182818) / 2 = 0.4124062; 1 - 0.2 * 0.4124062 = 0.9175188
    assert kl_penalized_rewards(
        [1.0], [logp], [ref], [mask], coef=0.2, estimator="k3", reduce="mean"
    ) == pytest.approx((0.9175188,), abs=1e-6)


def test_turn_discount():
    turns = [0, 0, 0, 1, 1, 2, 2]
    mask = [0, 1, 1, 0, 1, 0, 1]
    # K = 3: turn 0 gets 0.9^2 = 0.81, turn 1 0.9, turn 2 1.0; times A = 2
    values = turn_discounted_token_advantages(2.0, turns, mask, gamma=0.9)
    assert values.tolist() == pytest.approx([0, 1.62, 1.62, 0, 1.8, 0, 2.0], abs=1e-6)
    assert turn_discounted_token_advantages(2.0, turns, mask).tolist() == [0, 2, 2, 0, 2, 0, 2]


def test_bad_config():
    with pytest.raises(ValueError, match="mean_level and std_level must be one of"):
        GRPOConfig(mean_level="tokens")


def test_sample_token_advantages_from_atdp_samples():
    from tests.workers.atdp.fixtures import make_reward, make_trajectory
    from workers.rl.advantages import sample_token_advantages
    from workers.rl.samples import build_samples

    win = make_trajectory()
    loss = make_trajectory(rewards=[make_reward(value=0.0)])
    samples = build_samples([win, loss]).samples
    tokens, result = sample_token_advantages(samples, GRPOConfig(std_level="none"), gamma=0.5)
    # group {1, 0}: mean 0.5 -> +-0.5; turn 0 (the tool call) discounted by 0.5, turn 1 (the answer) not
    assert result.values == pytest.approx((0.5, -0.5))
    first = samples[0]
    expected = [
        0.0 if not m else (0.25 if t == 0 else 0.5) for m, t in zip(first.loss_mask, first.turns, strict=True)
    ]
    assert tokens[0].tolist() == pytest.approx(expected)
    assert tokens[1].tolist() == pytest.approx([-v for v in expected])
