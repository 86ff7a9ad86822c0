"""The loss one micro-batch contributes to a training step, per algorithm (formulas in workers.rl.losses):
SFT - mean NLL of generated tokens; GRPO - PPO against the behaviour logprobs; decoupled PPO - the ratio
against the proximal policy (log-linear from per-token versions, recomputed before the step, or this
forward's own logprobs, detached), weighted by the capped behaviour weight, optional KPop filter.

Each loss is divided by the minibatch's whole loss-token count (`denominator`), so the micro-batches'
gradients accumulate to the minibatch's mean. The step's counters (`totals`: kept, clipped, kl_sum) and
maxima (importance, behaviour weight) are updated here; the Trainer turns them into StepMetrics.
"""

from collections import Counter

import torch

from workers.engines.config import TrainConfig
from workers.rl.filtering import kpop_filter
from workers.rl.losses import PPOConfig, decoupled_ppo_loss, ppo_loss, sft_loss
from workers.rl.packing import pack_values
from workers.rl.proximal import loglinear_proximal_logprobs


def micro_batch_loss(
    logp: torch.Tensor,
    mask: torch.Tensor,
    samples,
    indices,
    *,
    config: TrainConfig,
    device: torch.device,
    token_advantages,
    recomputed,
    current_version: int | None,
    denominator,
    totals: Counter,
    maxima: dict,
) -> torch.Tensor:
    """The loss of the micro-batch of `samples[indices]` whose per-token logprobs are `logp` (packed, float32)
    and loss mask `mask`."""
    if config.algorithm == "sft":
        loss, _ = sft_loss(logp, mask, denominator=denominator)
        totals["kept"] += int(mask.sum())
        return loss
    behaviour = pack_values([samples[i].logprobs for i in indices]).to(device)
    advantages = torch.cat([token_advantages[i] for i in indices]).to(device)
    with torch.no_grad():
        drift = torch.where(mask.bool(), logp.detach() - behaviour, torch.zeros_like(logp))
        # typeshed types a Counter's values as int; the standard library takes any number
        totals["kl_sum"] += float(0.5 * drift.square().sum())  # type: ignore[assignment]
    if config.algorithm == "grpo":
        loss, stats = ppo_loss(
            logp,
            behaviour,
            advantages,
            mask,
            PPOConfig(eps_clip=config.eps_clip, eps_clip_high=config.eps_clip_high),
            denominator=denominator,
        )
    else:
        proximal = _proximal_logprobs(
            logp, behaviour, samples, indices, config, device, recomputed, current_version
        )
        keep = None
        if config.kpop_threshold is not None:
            keep = kpop_filter(behaviour, proximal, mask, config.kpop_threshold).keep_mask
        loss, stats = decoupled_ppo_loss(
            logp,
            proximal,
            behaviour,
            advantages,
            mask,
            PPOConfig(
                eps_clip=config.eps_clip,
                eps_clip_high=config.eps_clip_high,
                behaviour_weight_cap=config.behaviour_weight_cap,
                cap_mode=config.cap_mode,
            ),
            keep_mask=keep,
            denominator=denominator,
        )
    totals["kept"] += stats.kept_count
    totals["clipped"] += round(stats.clip_fraction * stats.kept_count)
    maxima["importance"] = max(maxima["importance"], stats.importance_weight_max)
    maxima["behaviour"] = max(maxima["behaviour"], stats.behaviour_weight_max)
    return loss


def _proximal_logprobs(
    logp, behaviour, samples, indices, config: TrainConfig, device, recomputed, current_version
) -> torch.Tensor:
    """The proximal policy's logprobs: the weights at the start of the step."""
    if config.proximal == "loglinear":
        if current_version is None:
            raise ValueError("the log-linear proximal approximation needs current_version")
        versions = pack_values([samples[i].versions for i in indices], torch.long).to(device)
        return loglinear_proximal_logprobs(behaviour, logp, versions, current_version)
    if recomputed is not None:
        return torch.cat([recomputed[i] for i in indices]).to(device)
    return logp.detach()
