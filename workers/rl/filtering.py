"""Off-policy token filtering (KPop-style): leave out of the loss the tokens whose behaviour and
proximal policies disagree too much.

Each token's probability under the two policies, p = exp(logp_behav) and q = exp(logp_prox), is read
as a Bernoulli parameter ("this token" vs "any other token"), and the token's divergence is the larger
of the forward and reverse Bernoulli KL:

    KL(p || q) = p log(p / q) + (1 - p) log((1 - p) / (1 - q))
    d_t        = max(KL(p || q), KL(q || p))

A token of the loss mask with d_t > threshold is masked. Unlike a ratio cap, this catches both a
probability that collapsed (0.6 -> 0.01) and one that saturated (0.01 -> 0.99), and it is bounded for
near-certain tokens where the log ratio is tiny. The result reports the masked fraction of the mask;
pass `keep_mask` to decoupled_ppo_loss, whose denominator stays the original mask count.
"""

from dataclasses import dataclass

import torch

_TINY = 1e-12


def bernoulli_kl(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """KL(Bernoulli(exp(logp)) || Bernoulli(exp(logq))), elementwise, in float64."""
    logp, logq = logp.to(torch.float64), logq.to(torch.float64)
    p = torch.exp(logp)
    log_not_p = torch.log1p(-p.clamp(max=1.0 - _TINY))
    log_not_q = torch.log1p(-torch.exp(logq).clamp(max=1.0 - _TINY))
    first = torch.where(p > 0, p * (logp - logq), torch.zeros_like(p))  # 0 log 0 = 0
    return (first + (1.0 - p) * (log_not_p - log_not_q)).clamp(min=0.0)


@dataclass(frozen=True)
class FilterResult:
    keep_mask: torch.Tensor  # bool, loss_mask minus the filtered tokens
    divergence: torch.Tensor  # d_t (float64; 0 outside the loss mask)
    masked_count: int
    token_count: int  # tokens in the loss mask
    masked_fraction: float


def kpop_filter(
    logp_behav: torch.Tensor, logp_prox: torch.Tensor, loss_mask: torch.Tensor, threshold: float
) -> FilterResult:
    if threshold < 0:
        raise ValueError("threshold must be >= 0")
    mask = loss_mask.bool()
    forward = bernoulli_kl(logp_behav, logp_prox)
    reverse = bernoulli_kl(logp_prox, logp_behav)
    divergence = torch.where(mask, torch.maximum(forward, reverse), torch.zeros_like(forward))
    masked = mask & (divergence > threshold)
    token_count, masked_count = int(mask.sum()), int(masked.sum())
    return FilterResult(
        keep_mask=mask & ~masked,
        divergence=divergence,
        masked_count=masked_count,
        token_count=token_count,
        masked_fraction=masked_count / max(token_count, 1),
    )
