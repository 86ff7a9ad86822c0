"""Keys and values of prompt prefixes the engine has computed, so that a prompt starting the same way (an
agent's system prompt and tool list, a conversation's earlier turns) prefills only its new tokens.

A prompt prefilled in full is stored once (its keys and values, every layer) and indexed under each of its
block boundaries (every BLOCK tokens). A lookup returns the longest indexed boundary the prompt starts
with, short of the prompt's last token (whose logits the prefill must compute). Stored prompts are evicted
least recently used beyond a token budget, and all are dropped when the weights change: keys and values
belong to the weights that computed them (the engine then prefills the most recently used prompt again
under the new weights, so the context its agents share is ready for the next request). Used only from the
engine's thread.
"""

from collections import OrderedDict
from dataclasses import dataclass

import torch

BLOCK = 32


@dataclass(frozen=True)
class PrefixHit:
    length: int
    keys: tuple[torch.Tensor, ...]  # per layer [1, heads, length, head_dim]
    values: tuple[torch.Tensor, ...]
    entry: tuple[int, ...]  # the stored prompt it is cut from (equal hits share one prefill)


class PrefixCache:
    def __init__(self, budget_tokens: int):
        self.budget_tokens = budget_tokens
        self._stored: OrderedDict[
            tuple[int, ...], tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]
        ] = OrderedDict()
        self._boundaries: dict[tuple[int, ...], tuple[int, ...]] = {}
        self._tokens = 0

    @property
    def tokens(self) -> int:
        return self._tokens

    def lookup(self, prompt: tuple[int, ...]) -> PrefixHit | None:
        for length in range((len(prompt) - 1) // BLOCK * BLOCK, 0, -BLOCK):
            entry = self._boundaries.get(prompt[:length])
            if entry is not None:
                self._stored.move_to_end(entry)
                keys, values = self._stored[entry]
                return PrefixHit(
                    length,
                    tuple(k[:, :, :length] for k in keys),
                    tuple(v[:, :, :length] for v in values),
                    entry,
                )
        return None

    def store(self, prompt: tuple[int, ...], keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        """`keys` / `values`: per layer [1, heads, len(prompt), head_dim], the prompt's own (no padding)."""
        if len(prompt) <= BLOCK or len(prompt) > self.budget_tokens or prompt in self._stored:
            return
        self._stored[prompt] = (tuple(k.clone() for k in keys), tuple(v.clone() for v in values))
        self._tokens += len(prompt)
        for length in range(BLOCK, len(prompt), BLOCK):
            self._boundaries[prompt[:length]] = prompt
        while self._tokens > self.budget_tokens:
            self._evict(next(iter(self._stored)))

    def most_recent(self) -> tuple[int, ...] | None:
        return next(reversed(self._stored), None)

    def clear(self) -> None:
        self._stored.clear()
        self._boundaries.clear()
        self._tokens = 0

    def _evict(self, prompt: tuple[int, ...]) -> None:
        del self._stored[prompt]
        self._tokens -= len(prompt)
        for length in range(BLOCK, len(prompt), BLOCK):
            key = prompt[:length]
            if self._boundaries.get(key) == prompt:
                del self._boundaries[key]
