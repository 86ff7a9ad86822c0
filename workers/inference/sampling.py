"""Per-request sampling parameters and the token choice for one batch row."""

import random
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int | None = None  # None: up to the context limit
    temperature: float = 1.0
    top_p: float = 1.0
    n: int = 1
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None
    top_logprobs: int = 0
    ignore_eos: bool = False

    def __post_init__(self):
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        if self.temperature < 0:
            raise ValueError("temperature must be non-negative")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if self.n < 1:
            raise ValueError("n must be at least 1")
        if self.top_logprobs < 0:
            raise ValueError("top_logprobs must be non-negative")

    @property
    def is_greedy(self) -> bool:
        return self.temperature < 1e-5  # below this logits / temperature overflows to inf; vLLM is greedy too


def choice_generator(params: SamplingParams, choice_index: int) -> torch.Generator | None:
    """A generator per choice, so a seeded request samples the same tokens whatever batch it shares."""
    if params.is_greedy:
        return None
    seed = params.seed + choice_index if params.seed is not None else random.SystemRandom().getrandbits(63)
    return torch.Generator().manual_seed(seed)


def sample_token(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> int:
    """Choose one token from a row of raw logits; the reported logprob is taken from the raw logits elsewhere."""
    if params.is_greedy:
        return int(torch.argmax(logits))
    scaled = logits.float() / params.temperature
    probabilities = torch.softmax(scaled, dim=-1)
    if params.top_p < 1:
        sorted_probabilities, sorted_ids = torch.sort(probabilities, descending=True)
        mass_before = torch.cumsum(sorted_probabilities, dim=-1) - sorted_probabilities
        sorted_probabilities[1:][mass_before[1:] >= params.top_p] = 0  # the top token survives any top_p
        choice = torch.multinomial(sorted_probabilities, 1, generator=generator)
        return int(sorted_ids[choice])
    return int(torch.multinomial(probabilities, 1, generator=generator))
