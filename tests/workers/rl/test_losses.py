"""SFT and decoupled PPO losses, the proximal approximation and the token filter, against hand-computed values.

The PPO case: eps 0.2, logp_prox = 0, logp = log r, logp_behav = -log w (so the behaviour weight is w).

| token | r   | A  | w   | -A r | -A clip(r) | term (max) | clipped | w * term |
| 1     | 1.5 | +1 | 1   | -1.5 | -1.2       | -1.2       | yes     | -1.2     |
| 2     | 0.5 | +1 | 2   | -0.5 | -0.8       | -0.5       | no      | -1.0     |
| 3     | 0.5 | -1 | 0.5 | +0.5 | +0.8       | +0.8       | yes     | +0.4     |
| 4     | 1.1 | -2 | 1   | +2.2 | +2.2       | +2.2       | no      | +2.2     |
| 5     | masked out (r 100, A 5, w 100)                                          |

L = (-1.2 - 1.0 + 0.4 + 2.2) / 4 = 0.1; clip fraction 2/4; r mean 0.9, max 1.5; w mean 1.125, max 2.
dL/dlogp (= dL/dr * r): clipped tokens 0; token 2: -A r w / 4 = -0.25; token 4: 2 * 1.1 / 4 = 0.55.
"""

import math

import pytest
import torch

from workers.rl.filtering import bernoulli_kl, kpop_filter
from workers.rl.losses import PPOConfig, decoupled_ppo_loss, ppo_loss, sft_loss, token_logprobs
from workers.rl.proximal import loglinear_proximal_logprobs, proximal_alpha, proximal_logprobs

R = [1.5, 0.5, 0.5, 1.1, 100.0]
A = [1.0, 1.0, -1.0, -2.0, 5.0]
W = [1.0, 2.0, 0.5, 1.0, 100.0]
MASK = [1, 1, 1, 1, 0]


def case():
    logp = torch.tensor([math.log(r) for r in R], requires_grad=True)
    prox = torch.zeros(5)
    behav = torch.tensor([-math.log(w) for w in W])
    return logp, prox, behav, torch.tensor(A), torch.tensor(MASK)


def test_decoupled_ppo_loss_hand_computed():
    logp, prox, behav, adv, mask = case()
    loss, stats = decoupled_ppo_loss(logp, prox, behav, adv, mask, PPOConfig(eps_clip=0.2))
    assert float(loss) == pytest.approx(0.1, abs=1e-6)
    loss.backward()
    assert logp.grad.tolist() == pytest.approx([0.0, -0.25, 0.0, 0.55, 0.0], abs=1e-6)
    assert stats.token_count == 4
    assert stats.kept_count == 4
    assert stats.clip_fraction == pytest.approx(0.5)
    assert stats.importance_weight_mean == pytest.approx(0.9, abs=1e-6)
    assert stats.importance_weight_max == pytest.approx(1.5, abs=1e-6)
    assert stats.behaviour_weight_mean == pytest.approx(1.125, abs=1e-6)
    assert stats.behaviour_weight_max == pytest.approx(2.0, abs=1e-6)
    # k2: (log 1.5)^2/2 = 0.0822006, (log 0.5)^2/2 = 0.2402265 (twice), (log 1.1)^2/2 = 0.0045420
    assert stats.approx_kl == pytest.approx((0.0822006 + 2 * 0.2402265 + 0.0045420) / 4, abs=1e-6)
    # behaviour: (log 2)^2/2 = 0.2402265 for tokens 2 and 3, 0 for 1 and 4
    assert stats.behaviour_approx_kl == pytest.approx(2 * 0.2402265 / 4, abs=1e-6)


def test_asymmetric_clip():
    logp, prox, behav, adv, mask = case()
    loss, stats = decoupled_ppo_loss(logp, prox, behav, adv, mask, PPOConfig(eps_clip=0.2, eps_clip_high=0.6))
    # token 1: r 1.5 < 1.6 is no longer clipped: -1.5; L = (-1.5 - 1.0 + 0.4 + 2.2) / 4 = 0.025
    assert float(loss) == pytest.approx(0.025, abs=1e-6)
    assert stats.clip_fraction == pytest.approx(0.25)


def test_behaviour_weight_cap_clamp_and_mask():
    logp, prox, behav, adv, mask = case()
    loss, stats = decoupled_ppo_loss(logp, prox, behav, adv, mask, PPOConfig(behaviour_weight_cap=1.5))
    # token 2: w 2 -> 1.5, -0.5 * 1.5 = -0.75; L = (-1.2 - 0.75 + 0.4 + 2.2) / 4 = 0.1625
    assert float(loss) == pytest.approx(0.1625, abs=1e-6)
    assert stats.capped_fraction == pytest.approx(0.25)
    assert stats.behaviour_weight_max == pytest.approx(1.5)
    loss, stats = decoupled_ppo_loss(
        logp, prox, behav, adv, mask, PPOConfig(behaviour_weight_cap=1.5, cap_mode="mask")
    )
    # token 2 leaves the loss, the denominator stays 4: (-1.2 + 0.4 + 2.2) / 4 = 0.35
    assert float(loss) == pytest.approx(0.35, abs=1e-6)
    assert stats.kept_count == 3
    assert stats.token_count == 4


def test_keep_mask_keeps_the_original_denominator():
    logp, prox, behav, adv, mask = case()
    keep = torch.tensor([1, 1, 1, 0, 1])
    loss, stats = decoupled_ppo_loss(logp, prox, behav, adv, mask, keep_mask=keep)
    # (-1.2 - 1.0 + 0.4) / 4 = -0.45 (not / 3)
    assert float(loss) == pytest.approx(-0.45, abs=1e-6)
    loss, _ = decoupled_ppo_loss(logp, prox, behav, adv, mask, keep_mask=keep, denominator=9)
    assert float(loss) == pytest.approx(-1.8 / 9, abs=1e-6)


def test_plain_ppo_is_decoupled_with_proximal_equal_to_behaviour():
    logp, _, _, adv, mask = case()
    old = torch.zeros(5)
    loss, stats = ppo_loss(logp, old, adv, mask)
    # weights all 1: (-1.2 - 0.5 + 0.8 + 2.2) / 4 = 0.325
    assert float(loss) == pytest.approx(0.325, abs=1e-6)
    assert stats.behaviour_weight_max == 1.0


def test_masked_infinite_behaviour_values_do_not_poison_the_gradient():
    logp, prox, behav, adv, mask = case()
    behav = behav.clone()
    behav[4] = -float("inf")  # masked token with an impossible behaviour logprob
    keep = torch.tensor([1, 1, 1, 1, 1])
    loss, _ = decoupled_ppo_loss(logp, prox, behav, adv, mask, keep_mask=keep)
    loss.backward()
    assert torch.isfinite(logp.grad).all()


def test_sft_loss_on_generated_tokens_only():
    logp = torch.tensor([-1.0, -2.0, -3.0])
    loss, stats = sft_loss(logp, torch.tensor([0, 1, 1]))
    assert float(loss) == pytest.approx(2.5)
    assert stats.token_count == 2
    assert stats.nll == pytest.approx(2.5)
    loss, _ = sft_loss(logp, torch.tensor([0, 1, 1]), denominator=5)
    assert float(loss) == pytest.approx(1.0)


def test_token_logprobs_alignment():
    # step 0 logits uniform over 3 -> token 2 gets -log 3 = -1.0986123; step 1 softmax [0.25, 0.5, 0.25]
    # -> token 1 gets log 0.5 = -0.6931472; the first token has no prediction: 0
    logits = torch.tensor([[[0.0, 0.0, 0.0], [0.0, math.log(2.0), 0.0], [5.0, 5.0, 5.0]]])
    ids = torch.tensor([[0, 2, 1]])
    assert token_logprobs(logits, ids)[0].tolist() == pytest.approx([0.0, -1.0986123, -0.6931472], abs=1e-6)


def test_proximal_alpha_and_loglinear_interpolation():
    # current V = 10, proximal P = 9: versions 9 -> 0; 7 -> (9-7)/(10-7) = 2/3; 5 -> 4/5; 10 -> 0 (no span);
    # -1 (context) -> 0
    versions = torch.tensor([9, 7, 5, 10, -1])
    assert proximal_alpha(versions, 10).tolist() == pytest.approx([0.0, 2 / 3, 0.8, 0.0, 0.0], abs=1e-6)
    assert proximal_alpha(versions, 10, proximal_version=10).tolist() == pytest.approx(
        [1.0, 1.0, 1.0, 0.0, 0.0]
    )
    behav = torch.tensor([-1.0, -3.0, -2.0, -1.0, 0.0])
    logp = torch.tensor([-2.0, -0.0, -1.0, -4.0, -5.0], requires_grad=True)
    prox = loglinear_proximal_logprobs(behav, logp, versions, 10)
    # -1; -3 + 2/3 * 3 = -1; -2 + 0.8 * 1 = -1.2; -1; 0
    assert prox.tolist() == pytest.approx([-1.0, -1.0, -1.2, -1.0, 0.0], abs=1e-6)
    assert not prox.requires_grad
    assert torch.equal(proximal_logprobs("behaviour", logp_behav=behav, logp=logp), behav)
    recomputed = torch.full((5,), -0.5)
    assert torch.equal(
        proximal_logprobs("recompute", logp_behav=behav, logp=logp, recomputed=recomputed), recomputed
    )
    with pytest.raises(ValueError, match="method loglinear needs per-token versions"):
        proximal_logprobs("loglinear", logp_behav=behav, logp=logp)


def test_bernoulli_kl_hand_computed():
    p = torch.log(torch.tensor([0.5, 0.1, 0.9]))
    q = torch.log(torch.tensor([0.25, 0.6, 0.9]))
    # KL(0.5||0.25) = 0.5 log 2 + 0.5 log(0.5/0.75) = 0.3465736 - 0.2027326 = 0.1438410
    # KL(0.1||0.6) = 0.1 log(1/6) + 0.9 log(0.9/0.4) = -0.1791759 + 0.7298369 = 0.5506610
    assert bernoulli_kl(p, q).tolist() == pytest.approx([0.1438410, 0.5506610, 0.0], abs=1e-6)
    # KL(0.25||0.5) = 0.25 log 0.5 + 0.75 log 1.5 = -0.1732868 + 0.3040988 = 0.1308120
    # KL(0.6||0.1) = 0.6 log 6 + 0.4 log(0.4/0.9) = 1.0750557 - 0.3243720 = 0.7506837
    assert bernoulli_kl(q, p).tolist() == pytest.approx([0.1308120, 0.7506837, 0.0], abs=1e-6)


def test_kpop_filter_masks_the_max_of_forward_and_reverse():
    behav = torch.log(torch.tensor([0.5, 0.1, 0.9, 0.1]))
    prox = torch.log(torch.tensor([0.25, 0.6, 0.9, 0.6]))
    mask = torch.tensor([1, 1, 1, 0])
    # divergences max(fwd, rev): 0.1438410, 0.7506837, 0; the 4th token is outside the mask
    result = kpop_filter(behav, prox, mask, threshold=0.6)
    assert result.keep_mask.tolist() == [True, False, True, False]
    assert result.masked_count == 1
    assert result.token_count == 3
    assert result.masked_fraction == pytest.approx(1 / 3)
    assert result.divergence.tolist() == pytest.approx([0.1438410, 0.7506837, 0.0, 0.0], abs=1e-6)
    # 0.7 lies between the forward (0.55) and reverse (0.75) KL of token 2: only the max catches it
    assert kpop_filter(behav, prox, mask, threshold=0.7).masked_count == 1
    assert kpop_filter(behav, prox, mask, threshold=0.1).masked_count == 2
    # a zero-probability behaviour token: the reverse KL is +inf (not NaN) and the token is masked
    zero = kpop_filter(torch.tensor([-float("inf")]), torch.tensor([-0.1]), torch.tensor([1]), 1.0)
    assert not torch.isnan(zero.divergence).any()
    assert zero.masked_count == 1


def test_config_validation():
    with pytest.raises(ValueError, match=r"eps_clip must be in \(0, 1\)"):
        PPOConfig(eps_clip=1.5)
    with pytest.raises(ValueError, match="cap_mode must be one of"):
        PPOConfig(cap_mode="drop")
