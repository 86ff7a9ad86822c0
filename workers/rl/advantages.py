"""GRPO advantages: one scalar per trajectory, normalized within its group (or the batch).

    A_i = (R_i - b_i) / (s_i + eps)

- `mean_level` picks the baseline b_i: "group" (mean reward of i's group), "batch" (mean over every
  unit in the batch) or "none" (b_i = 0). With `leave_one_out` the baseline excludes i itself:
  b_i = (sum of the level's rewards - R_i) / (n - 1) (RLOO).
- `std_level` picks the scale s_i the same way ("group", "batch", "none": s_i = 1, eps dropped). The
  standard deviation is over the whole level, i included; `std_unbiased` divides by n - 1 (as
  torch.std, TRL and AReaL do by default) rather than n.
- A group with one member has no group baseline: its mean and std fall back to the batch's, and a
  warning names the groups (AReaL issue #1473 was a silent zero advantage exactly here). The result
  lists them in `fallback_groups`; a batch of one unit warns as well, since its advantage is then zero
  whatever its reward.
- A unit without a group id (None) is a group of its own, so it takes the batch fallback too.
- Units are trajectories: a trajectory split into several samples (its token prefix broke) counts once
  in the statistics and every sample gets its advantage (pass `unit_ids`). A piece cut by per-step
  rewards (workers.rl.samples, `unit_id`) is a unit of its own, as AReaL counts each interaction.

Optional extras, applied in this order:
1. `kl_penalized_rewards`: R_i - beta * sum_t KL_t(pi || pi_ref) over i's generated tokens, with the k1
   (log ratio), k2 (half squared log ratio) or k3 (exp(-d) + d - 1, d = logp - ref) per-token estimator.
2. `grpo_advantages` as above.
3. `turn_discounted_token_advantages`: in a merged multi-turn sample, the generated tokens of turn k of
   K get gamma^(K-1-k) * A: the terminal return and its baseline are both discounted back to the turn
   (gamma = 1 broadcasts A to every generated token).

Pure Python + torch; no Django.
"""

import logging
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

logger = logging.getLogger(__name__)

LEVELS = ("group", "batch", "none")
KL_ESTIMATORS = ("k1", "k2", "k3")


@dataclass(frozen=True)
class GRPOConfig:
    mean_level: str = "group"
    std_level: str = "group"
    leave_one_out: bool = False
    std_unbiased: bool = True
    eps: float = 1e-5

    def __post_init__(self):
        if self.mean_level not in LEVELS or self.std_level not in LEVELS:
            raise ValueError(f"mean_level and std_level must be one of {LEVELS}")
        if self.eps < 0:
            raise ValueError("eps must be >= 0")


@dataclass(frozen=True)
class Advantages:
    values: tuple[float, ...]  # one per input (sample), in input order
    fallback_groups: tuple[Hashable, ...]  # one-member groups that used the batch baseline / std
    zero_std_groups: tuple[Hashable, ...]  # groups whose rewards were all equal (no learning signal)
    reward_mean: float
    reward_std: float
    advantage_mean: float
    advantage_std: float


def grpo_advantages(
    rewards: Sequence[float],
    group_ids: Sequence[Hashable],
    config: GRPOConfig = GRPOConfig(),
    *,
    unit_ids: Sequence[Hashable] | None = None,
) -> Advantages:
    """Advantages of each input; inputs with the same `unit_ids` entry are one trajectory (they must carry
    the same reward and group) and count once in every mean and std."""
    if len(rewards) != len(group_ids) or (unit_ids is not None and len(unit_ids) != len(rewards)):
        raise ValueError("rewards, group_ids (and unit_ids) must have the same length")
    if not rewards:
        return Advantages((), (), (), 0.0, 0.0, 0.0, 0.0)
    unit_of, unit_rewards, unit_groups = _units(rewards, group_ids, unit_ids)
    members: dict[Hashable, list[int]] = {}
    for unit, group in enumerate(unit_groups):
        members.setdefault(group, []).append(unit)
    batch = list(range(len(unit_rewards)))
    singles = tuple(group for group, units in members.items() if len(units) == 1)
    needs_group = "group" in (config.mean_level, config.std_level)
    fallback = singles if needs_group else ()
    if fallback:
        logger.warning(
            "GRPO: %d group(s) with a single sample use the batch baseline instead of a group baseline: %s",
            len(fallback),
            ", ".join(map(str, fallback[:10])),
        )
    if len(batch) == 1 and config.mean_level != "none":
        logger.warning(
            "GRPO: the batch holds a single trajectory; its baseline is its own reward and its "
            "advantage is zero"
        )

    def pool(level: str, unit: int) -> list[int]:
        if level == "group" and len(members[unit_groups[unit]]) > 1:
            return members[unit_groups[unit]]
        return batch

    advantages = []
    for unit, reward in enumerate(unit_rewards):
        baseline = 0.0
        if config.mean_level != "none":
            values = [unit_rewards[other] for other in pool(config.mean_level, unit)]
            if config.leave_one_out and len(values) > 1:
                baseline = (sum(values) - reward) / (len(values) - 1)
            else:
                baseline = sum(values) / len(values)
        scale = 1.0
        if config.std_level != "none":
            values = [unit_rewards[other] for other in pool(config.std_level, unit)]
            scale = _std(values, config.std_unbiased) + config.eps
        advantages.append((reward - baseline) / scale)
    zero_std = tuple(
        group
        for group, units in members.items()
        if len(units) > 1 and len({unit_rewards[u] for u in units}) == 1
    )
    return Advantages(
        values=tuple(advantages[unit] for unit in unit_of),
        fallback_groups=fallback,
        zero_std_groups=zero_std,
        reward_mean=sum(unit_rewards) / len(unit_rewards),
        reward_std=_std(unit_rewards, False),
        advantage_mean=sum(advantages) / len(advantages),
        advantage_std=_std(advantages, False),
    )


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k1") -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) at the sampled token (d = logp - ref_logp):
    k1 = d, k2 = d^2 / 2, k3 = exp(-d) + d - 1 (unbiased and >= 0; Schulman's estimator)."""
    d = logp - ref_logp
    if estimator == "k1":
        return d
    if estimator == "k2":
        return 0.5 * d * d
    if estimator == "k3":
        return torch.expm1(-d) + d
    raise ValueError(f"estimator must be one of {KL_ESTIMATORS}")


def kl_penalized_rewards(
    rewards: Sequence[float],
    logps: Sequence[torch.Tensor],
    ref_logps: Sequence[torch.Tensor],
    loss_masks: Sequence[torch.Tensor],
    *,
    coef: float,
    estimator: str = "k1",
    reduce: str = "sum",
) -> tuple[float, ...]:
    """R_i - coef * (sum or mean over i's generated tokens of the per-token KL estimate)."""
    if reduce not in ("sum", "mean"):
        raise ValueError("reduce must be sum or mean")
    penalized = []
    for reward, logp, ref, mask in zip(rewards, logps, ref_logps, loss_masks, strict=True):
        mask = mask.to(torch.float64)
        kl = (kl_penalty(logp.to(torch.float64), ref.to(torch.float64), estimator) * mask).sum()
        if reduce == "mean":
            kl = kl / mask.sum().clamp(min=1)
        penalized.append(float(reward) - coef * float(kl))
    return tuple(penalized)


def turn_discounted_token_advantages(
    advantage: float, turns: Sequence[int], loss_mask: Sequence[int], gamma: float = 1.0
) -> torch.Tensor:
    """Per-token advantages of one sample: gamma^(K-1-turn) * advantage on generated tokens (loss_mask 1),
    0 elsewhere; K is the number of turns (1 + the largest turn index)."""
    if len(turns) != len(loss_mask):
        raise ValueError("turns and loss_mask must have the same length")
    if not 0.0 < gamma <= 1.0:
        raise ValueError("gamma must be in (0, 1]")
    turn = torch.tensor(turns, dtype=torch.float64)
    last = float(turn.max()) if len(turns) else 0.0
    scale = torch.pow(torch.tensor(gamma, dtype=torch.float64), last - turn)
    mask = torch.tensor(loss_mask, dtype=torch.float64)
    return (advantage * scale * mask).to(torch.float32)


def sample_token_advantages(
    samples: Sequence, config: GRPOConfig = GRPOConfig(), *, gamma: float = 1.0, group_by: str = "group_id"
) -> tuple[list[torch.Tensor], Advantages]:
    """Per-token advantages of training samples (workers.rl.samples.TrainingSample or anything with reward,
    group_id / task_id, trajectory_id, turns and loss_mask): GRPO over trajectories grouped by `group_by`,
    then the turn discount. Every sample needs a reward."""
    if any(sample.reward is None for sample in samples):
        raise ValueError("every sample needs a reward")
    result = grpo_advantages(
        [sample.reward for sample in samples],
        [getattr(sample, group_by) for sample in samples],
        config,
        unit_ids=[getattr(sample, "unit_id", "") or sample.trajectory_id for sample in samples],
    )
    tokens = [
        turn_discounted_token_advantages(value, sample.turns, sample.loss_mask, gamma)
        for value, sample in zip(result.values, samples, strict=True)
    ]
    return tokens, result


# ---------------------------------------------------------------------------------------------------


def _units(rewards, group_ids, unit_ids):
    if unit_ids is None:
        unit_ids = range(len(rewards))
    index: dict[Hashable, int] = {}
    unit_of, unit_rewards, unit_groups = [], [], []
    for reward, group, unit in zip(rewards, group_ids, unit_ids, strict=True):
        if unit not in index:
            index[unit] = len(unit_rewards)
            unit_rewards.append(float(reward))
            unit_groups.append(group if group is not None else _Ungrouped(unit))
        elif unit_rewards[index[unit]] != float(reward) or unit_groups[index[unit]] != (
            group if group is not None else _Ungrouped(unit)
        ):
            raise ValueError(f"samples of unit {unit!r} disagree on reward or group")
        unit_of.append(index[unit])
    return unit_of, unit_rewards, unit_groups


@dataclass(frozen=True)
class _Ungrouped:
    """The group key of a unit without a group_id: a group of its own."""

    unit: Hashable

    def __str__(self) -> str:
        return f"<no group: {self.unit}>"


def _std(values: Sequence[float], unbiased: bool) -> float:
    count = len(values)
    if count < 2:
        return 0.0
    mean = sum(values) / count
    squares = sum((value - mean) ** 2 for value in values)
    return math.sqrt(squares / (count - 1 if unbiased else count))
