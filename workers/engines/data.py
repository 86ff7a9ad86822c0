"""Which samples each step trains on: a deterministic plan, so a resumed run picks up where it stopped.

`plan_batches(group_keys, batch_size=, total_steps=, seed=)` shuffles the groups (samples sharing a key:
a GRPO group stays whole, in one batch) once per epoch with a generator seeded by (seed, epoch) and
fills each batch with whole groups until it holds at least `batch_size` samples (a sample without a key
is a group of its own). Step k always gets the same batch, so a checkpoint's data position is the
number of steps done.
"""

import random
from collections.abc import Hashable, Sequence


def plan_batches(
    group_keys: Sequence[Hashable | None],
    *,
    batch_size: int,
    total_steps: int,
    seed: int = 0,
    shuffle: bool = True,
) -> list[tuple[int, ...]]:
    if not group_keys or batch_size < 1 or total_steps < 1:
        raise ValueError("there must be samples, and batch_size and total_steps must be >= 1")
    groups: dict[Hashable, list[int]] = {}
    for index, key in enumerate(group_keys):
        groups.setdefault(("key", key) if key is not None else ("alone", index), []).append(index)
    units = list(groups.values())
    batches: list[tuple[int, ...]] = []
    epoch = 0
    while len(batches) < total_steps:
        order = list(range(len(units)))
        if shuffle:
            random.Random(f"{seed}:{epoch}").shuffle(order)
        epoch += 1
        current: list[int] = []
        for unit in order:
            current += units[unit]
            if len(current) >= batch_size:
                batches.append(tuple(current))
                current = []
        if current:
            batches.append(tuple(current))
    return batches[:total_steps]
