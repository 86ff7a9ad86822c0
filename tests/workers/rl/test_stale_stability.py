"""Decoupled PPO on deliberately stale behaviour data (eta > 0, behaviour logprobs far below the current
policy's) keeps per-token weights and the gradient bounded, where plain PPO (ratio against the behaviour
policy, no proximal policy) explodes.

Why: with A < 0 and pi_theta / pi_behav = e^8 ~ 2981 far above 1 + eps, plain PPO's max(-A r, -A clip(r))
picks the unclipped -A r and its gradient carries the whole ratio. Decoupled PPO clips the ratio against
the proximal policy (1 at the start of the step) and caps the behaviour weight pi_prox / pi_behav, or the
KPop filter drops the tokens whose behaviour and proximal probabilities disagree (it catches large moves of
a token's probability; a rare token's Bernoulli KL stays small however large its ratio, which the cap
bounds)."""

import math

import torch

from workers.rl.filtering import kpop_filter
from workers.rl.losses import PPOConfig, decoupled_ppo_loss, ppo_loss
from workers.rl.packing import pack_sequences, packed_token_logprobs
from workers.rl.proximal import proximal_logprobs
from workers.rl.samples import TrainingSample

STALENESS = 8.0  # nats: the behaviour policy gave each stale token e^-8 of the current probability
CURRENT_VERSION, ETA, BEHAVIOUR_VERSION = 10, 4, 7  # 3 versions old: inside the bound, far off-policy
CAP = 5.0
CONFIG = PPOConfig(eps_clip=0.2, behaviour_weight_cap=CAP)


def grad_norm(model) -> float:
    return math.sqrt(sum(float(p.grad.square().sum()) for p in model.parameters() if p.grad is not None))


def per_token_weights(logp: torch.Tensor, loss: torch.Tensor, advantages: torch.Tensor, count: int):
    """|dL/dlogp_t| * N / |A_t|: how strongly each token pushes, in units of its advantage."""
    (grad,) = torch.autograd.grad(loss, logp, retain_graph=True)
    return grad.abs() * count / advantages.abs().clamp(min=1e-12)


def stale_batch(model):
    generator = torch.Generator().manual_seed(3)
    seqs = [
        torch.randint(3, model.config.vocab_size, (length,), generator=generator).tolist()
        for length in (12, 10, 15, 9)
    ]
    samples = []
    for index, seq in enumerate(seqs):
        mask = (0,) * 4 + (1,) * (len(seq) - 4)
        samples.append(
            TrainingSample(
                input_ids=tuple(seq),
                loss_mask=mask,
                logprobs=(0.0,) * len(seq),
                versions=tuple(BEHAVIOUR_VERSION if m else -1 for m in mask),
                turns=(0,) * len(seq),
                reward=float(index % 2),
                group_id="g",
                task_id="t",
                trajectory_id=f"t{index}",
                step_ids=("s",),
            )
        )
    assert all(CURRENT_VERSION - v <= ETA for s in samples for v in s.versions if v >= 0)
    return samples


def test_decoupled_ppo_bounded_where_plain_ppo_explodes(default_model):
    model = default_model
    samples = stale_batch(model)
    row = pack_sequences([s.input_ids for s in samples])
    mask = torch.tensor([m for s in samples for m in s.loss_mask])
    # advantages +-1 by sequence (the dangerous tokens for plain PPO are the A < 0 ones)
    advantages = torch.cat([torch.full((len(s.input_ids),), 1.0 if s.reward else -1.0) for s in samples])
    count = int(mask.sum())

    logp = packed_token_logprobs(model, row)
    recomputed = logp.detach()  # the proximal policy is the model at the start of the step
    stale = mask.bool() & (torch.arange(mask.numel()) % 2 == 0)  # every other generated token is stale
    behaviour = torch.where(stale, recomputed - STALENESS, recomputed)
    prox = proximal_logprobs("recompute", logp_behav=behaviour, logp=logp, recomputed=recomputed)

    plain, plain_stats = ppo_loss(logp, behaviour, advantages, mask, CONFIG)
    decoupled, stats = decoupled_ppo_loss(logp, prox, behaviour, advantages, mask, CONFIG)
    plain_weights = per_token_weights(logp, plain, advantages, count)
    decoupled_weights = per_token_weights(logp, decoupled, advantages, count)

    # plain PPO: stale A < 0 tokens push with the full ratio e^8 ~ 2981
    assert plain_stats.importance_weight_max > 2900
    assert float(plain_weights.max()) > 2900
    # decoupled: ratio 1 against the proximal policy, behaviour weight capped at 5
    assert stats.importance_weight_max == 1.0
    assert stats.behaviour_weight_max == CAP
    assert stats.capped_fraction > 0.4
    assert float(decoupled_weights.max()) <= CAP * (1 + CONFIG.eps_clip) + 1e-4

    model.zero_grad()
    plain.backward(retain_graph=True)
    plain_norm = grad_norm(model)
    model.zero_grad()
    decoupled.backward(retain_graph=True)
    decoupled_norm = grad_norm(model)
    assert math.isfinite(decoupled_norm)
    assert decoupled_norm > 0
    assert plain_norm > 50 * decoupled_norm

    # The KPop filter does not replace the cap here: under this untrained model the tokens are rare
    # (p ~ e^-8), and the Bernoulli KL of a rare token is about p * log(p / p_behav) ~ 3e-3, under any
    # sensible threshold. The filter catches large probability moves (the next test); the cap bounds the rest.
    assert kpop_filter(behaviour, prox, mask, threshold=0.05).masked_count == 0


def test_plain_ppo_diverges_over_steps_while_decoupled_stays_bounded():
    """A 6-action softmax policy trained 5 steps x 4 minibatch updates on the same stale batch. The gradient of
    log softmax(theta)_a is e_a - pi, of norm <= sqrt(2), so decoupled PPO's gradient norm is bounded by
    cap * (1 + eps) * max|A| * sqrt(2); plain PPO's is not."""
    generator = torch.Generator().manual_seed(5)
    actions = torch.randint(0, 6, (64,), generator=generator)
    advantages = torch.where(torch.rand(64, generator=generator) < 0.5, -1.0, 1.0)
    # half the tokens come from a stale policy that almost never took these actions, half from the initial one
    stale = torch.arange(64) % 2 == 0
    behaviour = torch.where(stale, math.log(1e-4), math.log(1 / 6))
    mask = torch.ones(64)
    bound = CAP * (1 + CONFIG.eps_clip) * 1.0 * math.sqrt(2)

    def train(mode: str) -> tuple[float, float]:
        theta = torch.zeros(6, requires_grad=True)
        largest = 0.0
        for _ in range(5):
            prox = torch.log_softmax(theta.detach(), -1)[actions]
            keep = kpop_filter(behaviour, prox, mask, threshold=0.5) if mode == "filtered" else None
            if keep is not None:
                # pi_prox ~ 1/6 against 1e-4: KL(1/6 || 1e-4) = ln(1667) / 6 + (5/6) ln(5/6) = 1.08 > 0.5
                assert keep.keep_mask[stale].sum() == 0
            for _ in range(4):
                logp = torch.log_softmax(theta, -1)[actions]
                if mode == "capped":
                    loss, _ = decoupled_ppo_loss(logp, prox, behaviour, advantages, mask, CONFIG)
                elif mode == "filtered":
                    loss, _ = decoupled_ppo_loss(
                        logp,
                        prox,
                        behaviour,
                        advantages,
                        mask,
                        PPOConfig(eps_clip=0.2),
                        keep_mask=keep.keep_mask,
                    )
                else:
                    loss, _ = ppo_loss(logp, behaviour, advantages, mask, CONFIG)
                (grad,) = torch.autograd.grad(loss, theta)
                largest = max(largest, float(grad.norm()))
                with torch.no_grad():
                    theta -= 0.5 * grad
        return largest, float(theta.detach().abs().max())

    decoupled_grad, decoupled_theta = train("capped")
    filtered_grad, filtered_theta = train("filtered")
    plain_grad, plain_theta = train("plain")
    assert decoupled_grad <= bound
    assert 0 < filtered_grad <= bound
    assert filtered_theta < 20
    assert plain_grad > 10 * bound
    assert plain_theta > 10 * decoupled_theta
