"""The model work of one step of the inference engine's thread (workers.inference.engine): the prompts admitted
at this step boundary prefilled (one padded forward pass per prefix cache entry they share, one for those
without) and their first tokens sampled, then one batched decoding forward pass over every running sequence;
and, after a weight swap that recomputes, the running sequences' caches prefilled again. Runs on the engine
thread only; the counters it keeps are read under the engine's lock.
"""

import threading
from collections import Counter
from typing import Any

import torch

from workers.inference.batch_cache import PaddedBatchCache, plain_layer, zero_padding
from workers.inference.prefix_cache import PrefixCache, PrefixHit
from workers.inference.sampling import sample_token
from workers.inference.sequence import Sequence, StopRules
from workers.inference.stream import RequestStream, TokenEvent


class EngineSteps:
    """The forward passes of InferenceEngine, which sets up the state declared here."""

    model: Any  # a transformers causal LM
    version: int
    _backend: Any  # the fast tokenizer's backend, for incremental detokenization
    _stop_rules: StopRules
    _batch: PaddedBatchCache
    _prefix_cache: PrefixCache | None
    _running: list[Sequence]
    _wakeup: threading.Condition
    _decode_steps: int
    _prefills: int
    _generated_tokens: int
    _prefill_tokens: int
    _prefix_hit_tokens: int
    _decode_batch_sizes: Counter

    def _step(self, admitted: list[RequestStream]) -> None:
        events: dict[RequestStream, list[TokenEvent]] = {}
        if admitted:
            self._admit(admitted, events)
        if self._running:
            self._decode(events)
        for stream, stream_events in events.items():
            stream.deliver(stream_events)

    def _admit(self, admitted: list[RequestStream], events: dict) -> None:
        """Prefill the new prompts (one padded forward pass per cached prefix they share, one for those
        without), sample each choice's first token, join the batch."""
        groups: dict = {}
        for stream in admitted:
            hit = (
                self._prefix_cache.lookup(stream.prompt_token_ids) if self._prefix_cache is not None else None
            )
            key = (hit.entry, hit.length) if hit is not None else None
            groups.setdefault(key, (hit, []))[1].append(stream)
        for hit, streams in groups.values():
            prompts = [stream.prompt_token_ids for stream in streams]
            cache, mask, logits = self._prefill(prompts, hit)
            if hit is None:
                self._remember(prompts, cache, mask)
            logprobs = torch.log_softmax(logits, dim=-1)
            self._prefills += len(streams)
            repeats = []
            for row, stream in enumerate(streams):
                survivors = 0
                for index in range(stream.params.n):
                    sequence = Sequence.start(stream, index, self._backend)
                    token = sample_token(logits[row], sequence.params, sequence.generator)
                    if self._record(sequence, logprobs[row], token, events):
                        self._running.append(sequence)
                        survivors += 1
                repeats.append(survivors)
            self._batch.append_rows(cache, mask, repeats)

    def _prefill(self, contexts: list[tuple[int, ...]], hit: PrefixHit | None = None):
        """One forward pass over left-padded contexts: their cache, padding mask and last-position logits.
        With a prefix cache hit, every context starts with the hit's tokens: only the rest runs, on the
        hit's keys and values (the mask covers each row's padding between the two)."""
        start = hit.length if hit is not None else 0
        rests = [context[start:] for context in contexts]
        width = max(len(rest) for rest in rests)
        input_ids = torch.zeros(len(contexts), width, dtype=torch.long)
        mask = torch.zeros(len(contexts), start + width, dtype=torch.long)
        mask[:, :start] = 1
        for row, rest in enumerate(rests):
            input_ids[row, width - len(rest) :] = torch.tensor(rest)
            mask[row, start + width - len(rest) :] = 1
        cache = self._batch.new_cache()
        if hit is not None:
            for layer, keys, values in zip(map(plain_layer, cache.layers), hit.keys, hit.values, strict=True):
                layer.lazy_initialization(keys, values)
                layer.keys = keys.expand(len(contexts), -1, -1, -1)
                layer.values = values.expand(len(contexts), -1, -1, -1)
        output = self.model(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=(mask.cumsum(dim=-1) - 1).clamp(min=0)[:, start:],
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        zero_padding(cache, mask)
        self._prefill_tokens += sum(len(rest) for rest in rests)
        self._prefix_hit_tokens += start * len(contexts)
        return cache, mask, output.logits[:, -1, :].float()

    def _remember(self, prompts: list[tuple[int, ...]], cache, mask: torch.Tensor) -> None:
        """Store prompts prefilled in full in the prefix cache, for the prompts that follow (not the running
        contexts a swap recomputes: those end in generated tokens no later prompt starts with)."""
        if self._prefix_cache is None:
            return
        for row, prompt in enumerate(prompts):
            real = mask[row].bool()
            self._prefix_cache.store(
                prompt,
                [layer.keys[row : row + 1, :, real] for layer in cache.layers],
                [layer.values[row : row + 1, :, real] for layer in cache.layers],
            )

    def _decode(self, events: dict) -> None:
        rows = len(self._running)
        input_ids = torch.tensor([[sequence.generated[-1]] for sequence in self._running])
        position_ids = torch.tensor([[sequence.cached_length] for sequence in self._running])
        attention_mask = self._batch.extend_mask_for_step()
        output = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=self._batch.cache,
            use_cache=True,
        )
        with self._wakeup:
            self._decode_steps += 1
            self._decode_batch_sizes[rows] += 1
        logits = output.logits[:, -1, :].float()
        logprobs = torch.log_softmax(logits, dim=-1)
        greedy = logits.argmax(dim=-1).tolist()
        survivors = []
        for row, sequence in enumerate(self._running):
            token = (
                greedy[row]
                if sequence.params.is_greedy
                else sample_token(logits[row], sequence.params, sequence.generator)
            )
            if self._record(sequence, logprobs[row], token, events):
                survivors.append(row)
        self._running = [self._running[row] for row in survivors]
        self._batch.keep_rows(survivors)

    def _record(self, sequence: Sequence, logprobs: torch.Tensor, token: int, events: dict) -> bool:
        """Append a sampled token, queue its event, and say whether the sequence goes on."""
        event = sequence.append(token, logprobs, self.version, self._stop_rules)
        self._generated_tokens += 1
        events.setdefault(sequence.stream, []).append(event)
        return event.finish_reason is None

    def _recompute_running_caches(self) -> None:
        self._batch = PaddedBatchCache(self.model.config)
        if self._running:
            contexts = [sequence.context for sequence in self._running]
            cache, mask, _ = self._prefill(contexts)
            self._batch.append_rows(cache, mask, [1] * len(contexts))
