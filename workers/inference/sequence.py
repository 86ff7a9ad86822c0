"""One choice being generated: its tokens, its text, and the rules that end it."""

from dataclasses import dataclass, field

import torch

from workers.inference.detokenize import IncrementalDetokenizer
from workers.inference.sampling import SamplingParams, choice_generator
from workers.inference.stream import RequestStream, TokenEvent


@dataclass(frozen=True)
class StopRules:
    end_token_ids: frozenset[int]
    max_model_len: int


@dataclass
class Sequence:
    stream: RequestStream
    choice_index: int
    detokenizer: IncrementalDetokenizer
    generator: torch.Generator | None
    generated: list[int] = field(default_factory=list)

    @classmethod
    def start(cls, stream: RequestStream, choice_index: int, backend_tokenizer) -> "Sequence":
        return cls(
            stream=stream,
            choice_index=choice_index,
            detokenizer=IncrementalDetokenizer(backend_tokenizer, stream.params.stop),
            generator=choice_generator(stream.params, choice_index),
        )

    @property
    def params(self) -> SamplingParams:
        return self.stream.params

    @property
    def context(self) -> tuple[int, ...]:
        """The tokens whose keys and values are cached: all but the last sampled one."""
        return self.stream.prompt_token_ids + tuple(self.generated[:-1])

    @property
    def cached_length(self) -> int:
        return len(self.stream.prompt_token_ids) + len(self.generated) - 1

    def append(self, token: int, logprobs: torch.Tensor, version: int, rules: StopRules) -> TokenEvent:
        """Record a sampled token (logprobs: the raw log_softmax row it was sampled from) and say what it ends."""
        top: tuple[tuple[int, float], ...] = ()
        if self.params.top_logprobs:
            values, ids = torch.topk(logprobs, min(self.params.top_logprobs, logprobs.shape[-1]))
            top = tuple(zip(ids.tolist(), values.tolist(), strict=True))
        self.generated.append(token)
        text_step = self.detokenizer.push(token)
        text = text_step.delta
        finish_reason: str | None = None
        stop_reason: str | int | None = None
        if text_step.stop_string is not None:
            finish_reason, stop_reason = "stop", text_step.stop_string
        elif token in self.params.stop_token_ids:
            finish_reason, stop_reason = "stop", token
        elif token in rules.end_token_ids and not self.params.ignore_eos:
            finish_reason = "stop"
        elif (
            self.params.max_tokens is not None and len(self.generated) >= self.params.max_tokens
        ) or self.cached_length + 1 >= rules.max_model_len:
            finish_reason = "length"
        if finish_reason is not None and text_step.stop_string is None:
            text += self.detokenizer.flush()
        return TokenEvent(
            choice_index=self.choice_index,
            token_id=token,
            logprob=float(logprobs[token]),
            top_logprobs=top,
            policy_version=version,
            text=text,
            finish_reason=finish_reason,
            stop_reason=stop_reason,
        )
