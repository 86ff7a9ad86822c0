"""Learning-rate schedules as a multiplier of the base rate, by optimizer update count.

    warmup  (u < W):      (u + 1) / W
    constant:             1
    linear:               r + (1 - r) * (1 - p)
    cosine:               r + (1 - r) * (1 + cos(pi * p)) / 2
    where p = clamp((u - W) / max(T - W, 1), 0, 1), T = total updates, r = min_lr_ratio.

The state is the update count alone (`state_dict`), so a checkpoint restores it exactly.
"""

import math


class LRSchedule:
    def __init__(
        self, *, kind: str, base_lr: float, warmup_steps: int, total_steps: int, min_lr_ratio: float = 0.0
    ):
        if kind not in ("constant", "linear", "cosine"):
            raise ValueError(f"unknown schedule {kind!r}")
        self.kind, self.base_lr = kind, base_lr
        self.warmup_steps, self.total_steps, self.min_lr_ratio = warmup_steps, total_steps, min_lr_ratio
        self.updates = 0

    def multiplier(self, update: int) -> float:
        if update < self.warmup_steps:
            return (update + 1) / self.warmup_steps
        if self.kind == "constant":
            return 1.0
        progress = min(
            max((update - self.warmup_steps) / max(self.total_steps - self.warmup_steps, 1), 0.0), 1.0
        )
        ratio = self.min_lr_ratio
        if self.kind == "linear":
            return ratio + (1.0 - ratio) * (1.0 - progress)
        return ratio + (1.0 - ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    def current(self) -> float:
        """The rate of the next update."""
        return self.base_lr * self.multiplier(self.updates)

    def apply(self, optimizer) -> float:
        rate = self.current()
        for group in optimizer.param_groups:
            group["lr"] = rate
        return rate

    def advance(self) -> None:
        self.updates += 1

    def state_dict(self) -> dict:
        return {"updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        self.updates = int(state["updates"])
