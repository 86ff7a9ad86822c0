"""Token log-probabilities, the SFT loss and AReaL's decoupled PPO loss.

Every per-token tensor here is aligned with the input ids, as in the ATDP training view: entry t
belongs to token t (its log-probability is predicted from tokens < t), entry 0 of a sequence is 0.

Decoupled PPO (Fu et al., "AReaL: A Large-Scale Asynchronous Reinforcement Learning System for
Language Reasoning", 2025, section 5): three policies meet in one loss,

    pi_theta   the policy being optimized (logp, carries the gradient)
    pi_prox    the proximal policy: the trust region's centre (logp_prox, recomputed or approximated)
    pi_behav   the policy that sampled the tokens, possibly several versions old (logp_behav, inference)

    r_t = exp(logp_t - logp_prox_t)                              PPO ratio against the proximal policy
    w_t = exp(logp_prox_t - logp_behav_t)                        behaviour importance weight (no grad)
    l_t = w_t * max(-A_t * r_t, -A_t * clip(r_t, 1 - eps_low, 1 + eps_high))
    L   = sum over kept tokens of l_t / (number of tokens in the ORIGINAL loss mask)

The denominator is the original mask count, so tokens removed by the behaviour-weight cap (mask mode)
or by the off-policy token filter do not inflate the others' gradient. Plain PPO is the special case
logp_prox = logp_behav (w = 1; `ppo_loss`). Stats follow AReaL's: clip fraction, the ratio's mean and
max, the behaviour weight's mean and max, and approximate KLs (k2 = mean of half squared log ratios).
"""

from dataclasses import dataclass

import torch

CAP_MODES = ("clamp", "mask")


def token_logprobs(
    logits: torch.Tensor, input_ids: torch.Tensor, *, temperature: float = 1.0
) -> torch.Tensor:
    """log pi(input_ids[t] | input_ids[<t]) for every t, aligned with input_ids (entry 0 is 0).
    logits: [..., T, V] from a causal LM over input_ids [..., T]; computed in float32."""
    logits = logits[..., :-1, :].float()
    if temperature != 1.0:
        logits = logits / temperature
    targets = input_ids[..., 1:].unsqueeze(-1)
    picked = torch.gather(logits, -1, targets).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    return torch.nn.functional.pad(picked, (1, 0), value=0.0)


@dataclass(frozen=True)
class SFTStats:
    token_count: int
    nll: float  # mean negative log-likelihood per generated token


def sft_loss(
    logp: torch.Tensor, loss_mask: torch.Tensor, *, denominator: int | None = None
) -> tuple[torch.Tensor, SFTStats]:
    """Mean negative log-likelihood over generated tokens (loss_mask 1); context tokens carry no loss.
    `denominator` overrides the mask count (the whole batch's, under gradient accumulation)."""
    mask = loss_mask.bool()
    count = int(mask.sum())
    total = -torch.where(mask, logp, torch.zeros_like(logp)).sum()
    loss = total / max(denominator if denominator is not None else count, 1)
    return loss, SFTStats(token_count=count, nll=float(total.detach()) / max(count, 1))


@dataclass(frozen=True)
class PPOConfig:
    eps_clip: float = 0.2  # eps_low: the ratio's lower bound is 1 - eps_clip
    eps_clip_high: float | None = None  # asymmetric upper bound 1 + eps_clip_high (DAPO's clip-higher)
    behaviour_weight_cap: float | None = None  # None: uncapped
    cap_mode: str = "clamp"  # clamp: w = min(w, cap); mask: tokens with w > cap leave the loss

    def __post_init__(self):
        if not 0 < self.eps_clip < 1 or (self.eps_clip_high is not None and self.eps_clip_high <= 0):
            raise ValueError("eps_clip must be in (0, 1) and eps_clip_high > 0")
        if self.cap_mode not in CAP_MODES:
            raise ValueError(f"cap_mode must be one of {CAP_MODES}")
        if self.behaviour_weight_cap is not None and self.behaviour_weight_cap <= 0:
            raise ValueError("behaviour_weight_cap must be > 0")


@dataclass(frozen=True)
class PPOStats:
    token_count: int  # tokens in the original loss mask (the denominator unless overridden)
    kept_count: int  # tokens that contributed (after keep_mask and a mask-mode cap)
    clip_fraction: float  # kept tokens whose clipped term was the active one
    importance_weight_mean: float  # r = pi_theta / pi_prox over kept tokens
    importance_weight_max: float
    behaviour_weight_mean: float  # w = pi_prox / pi_behav over kept tokens, after the cap
    behaviour_weight_max: float
    capped_fraction: float  # tokens of the original mask whose w exceeded the cap
    approx_kl: float  # mean of (logp - logp_prox)^2 / 2 over kept tokens
    behaviour_approx_kl: float  # mean of (logp_prox - logp_behav)^2 / 2 over kept tokens


def decoupled_ppo_loss(
    logp: torch.Tensor,
    logp_prox: torch.Tensor,
    logp_behav: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    config: PPOConfig = PPOConfig(),
    *,
    keep_mask: torch.Tensor | None = None,
    denominator: int | None = None,
) -> tuple[torch.Tensor, PPOStats]:
    """AReaL's decoupled PPO loss (module docstring). `keep_mask` (e.g. the off-policy token filter's)
    removes tokens without changing the denominator; `denominator` overrides the original mask count
    (the whole batch's, under gradient accumulation). Gradients flow through `logp` only."""
    shapes = {tuple(t.shape) for t in (logp, logp_prox, logp_behav, advantages, loss_mask)}
    if len(shapes) != 1:
        raise ValueError(f"all inputs must have the same shape, got {sorted(shapes)}")
    mask = loss_mask.bool()
    count = int(mask.sum())
    kept = mask if keep_mask is None else mask & keep_mask.bool()
    zero = torch.zeros_like(logp)
    logp_prox = logp_prox.detach().to(logp.dtype)
    advantages = advantages.detach().to(logp.dtype)

    log_ratio = torch.where(kept, logp - logp_prox, zero)
    ratio = torch.exp(log_ratio)
    high = config.eps_clip if config.eps_clip_high is None else config.eps_clip_high
    clipped_ratio = ratio.clamp(1.0 - config.eps_clip, 1.0 + high)
    unclipped_term = -advantages * ratio
    clipped_term = -advantages * clipped_ratio
    clip_active = kept & (clipped_term.detach() > unclipped_term.detach())
    term = torch.maximum(unclipped_term, clipped_term)

    behaviour_log = torch.where(mask, logp_prox - logp_behav.detach().to(logp.dtype), zero)
    weight = torch.exp(behaviour_log)
    capped = torch.zeros_like(mask)
    if config.behaviour_weight_cap is not None:
        capped = mask & (weight > config.behaviour_weight_cap)
        if config.cap_mode == "clamp":
            weight = weight.clamp(max=config.behaviour_weight_cap)
        else:
            kept = kept & ~capped
            clip_active = clip_active & kept

    # zero the weight (not the product) outside `kept`: 0 * inf there would turn the gradient into NaN
    weight = torch.where(kept, weight, zero)
    loss = (term * weight).sum() / max(denominator if denominator is not None else count, 1)

    with torch.no_grad():
        kept_count = int(kept.sum())
        denom = max(kept_count, 1)

        def mean(values: torch.Tensor) -> float:
            return float(torch.where(kept, values, zero).sum()) / denom

        def maximum(values: torch.Tensor) -> float:
            return float(values[kept].max()) if kept_count else 0.0

        stats = PPOStats(
            token_count=count,
            kept_count=kept_count,
            clip_fraction=float(clip_active.sum()) / denom,
            importance_weight_mean=mean(ratio),
            importance_weight_max=maximum(ratio),
            behaviour_weight_mean=mean(weight),
            behaviour_weight_max=maximum(weight),
            capped_fraction=float(capped.sum()) / max(count, 1),
            approx_kl=mean(0.5 * log_ratio.square()),
            behaviour_approx_kl=mean(0.5 * behaviour_log.square()),
        )
    return loss, stats


def ppo_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    config: PPOConfig = PPOConfig(),
    **kwargs,
) -> tuple[torch.Tensor, PPOStats]:
    """Plain (coupled) PPO: the ratio against the sampling policy itself, no behaviour weight."""
    return decoupled_ppo_loss(logp, logp_old, logp_old, advantages, loss_mask, config, **kwargs)
