"""The generation engine: one background thread that runs a transformers causal LM with iteration-level
batching. Requests that arrive while others run are prefilled at the next step boundary and join the
batch; every decoding step is one batched forward pass over a shared, left-padded KV cache. A prompt that
starts like one prefilled before (a system prompt, earlier turns) takes that prefix's keys and values from
the prefix cache (workers.inference.prefix_cache) and prefills only the rest.

Weight swaps happen at a step boundary: in-flight sequences get their KV cache recomputed with the new
weights and go on (AReaL's interruptible generation), or, when the caller asks to keep the caches, go on
over the caches the old weights wrote (PipelineRL's in-flight update: no recompute, each token's
behaviour logprob is still exactly what it was sampled from); each token carries the policy version that
produced it.
"""

import asyncio
import dataclasses
import threading
import time
import uuid
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path

import torch

from workers.inference.batch_cache import PaddedBatchCache
from workers.inference.engine_steps import EngineSteps
from workers.inference.modelgen import tokenizer_fingerprint
from workers.inference.prefix_cache import PrefixCache
from workers.inference.sampling import SamplingParams
from workers.inference.sequence import Sequence, StopRules
from workers.inference.stream import EngineFailure, GenerationResult, RequestStream, TokenEvent


class ContextLengthError(ValueError):
    pass


class CheckpointRefused(Exception):
    """A checkpoint that cannot replace the current one; status is the HTTP status that says why."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class SwapReport:
    previous_version: int
    version: int
    model_dir: str
    load_seconds: float  # reading the checkpoint, while the old weights keep serving
    swap_seconds: float  # waiting for a step boundary and recomputing in-flight KV caches (unless kept)
    recomputed_sequences: int


@dataclass(frozen=True)
class EngineStats:
    decode_steps: int
    prefills: int
    generated_tokens: int
    swaps: int
    max_decode_batch_size: int
    decode_batch_sizes: dict[int, int]
    prefill_tokens: int = 0  # prompt tokens run through the model (padding not counted)
    prefix_hit_tokens: int = 0  # prompt tokens whose keys and values came from the prefix cache


@dataclass(frozen=True)
class EngineStatus:
    version: int
    model_dir: str
    paused: bool
    running_sequences: int
    waiting_requests: int


@dataclass
class _Swap:
    model: torch.nn.Module
    version: int
    model_dir: str
    recompute: bool = True
    applied: threading.Event = field(default_factory=threading.Event)
    recomputed_sequences: int = 0


@dataclass
class _Pause:
    applied: threading.Event = field(default_factory=threading.Event)


@dataclass
class _Abort:
    request_id: str


class InferenceEngine(EngineSteps):
    """The serving engine: requests queued, commands (pause, abort, swap) applied and one step run at each
    boundary on its thread; the step's forward passes are EngineSteps' (workers.inference.engine_steps)."""

    def __init__(
        self,
        model_dir,
        *,
        version: int = 0,
        max_batch_size: int = 32,
        max_model_len: int | None = None,
        dtype: torch.dtype = torch.float32,
        prefix_cache_tokens: int = 16384,
    ):
        from transformers import AutoTokenizer

        self.model_dir = str(model_dir)
        self.version = version
        self.max_batch_size = max_batch_size
        self.dtype = dtype
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        if not self.tokenizer.is_fast:
            raise ValueError("the embedded server needs a fast (tokenizers) tokenizer")
        self.tokenizer_fingerprint = tokenizer_fingerprint(model_dir)
        self.model = self._load_model(model_dir)
        config_limit = getattr(self.model.config, "max_position_embeddings", None) or 2048
        self.max_model_len = min(max_model_len or config_limit, config_limit)
        self.end_token_ids = self._end_token_ids()
        self._stop_rules = StopRules(self.end_token_ids, self.max_model_len)
        self._backend = self.tokenizer.backend_tokenizer
        self._token_texts: dict[int, str] = {}
        self._batch = PaddedBatchCache(self.model.config)
        self._prefix_cache = PrefixCache(prefix_cache_tokens) if prefix_cache_tokens > 0 else None
        self._running: list[Sequence] = []
        self._waiting: deque[RequestStream] = deque()
        self._commands: deque = deque()
        self._wakeup = threading.Condition()
        self._load_lock = threading.Lock()
        self._paused = False
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.reset_stats()

    # ---- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> "InferenceEngine":
        self._thread = threading.Thread(target=self._run, name="inference-engine", daemon=True)
        self._thread.start()
        return self

    @property
    def is_running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        with self._wakeup:
            self._stopping = True
            self._wakeup.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10)

    # ---- requests --------------------------------------------------------------------------------------

    def submit(
        self,
        prompt_token_ids,
        params: SamplingParams,
        *,
        request_id: str | None = None,
        incremental: bool = True,
    ) -> RequestStream:
        """Queue a request; raises ContextLengthError or ValueError for one that cannot run. With
        incremental=False the stream yields events only when choices finish (for non-streaming callers)."""
        prompt = tuple(int(token) for token in prompt_token_ids)
        params = self._bounded(prompt, params)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        stream = RequestStream(request_id or uuid.uuid4().hex, prompt, params, loop, incremental=incremental)
        with self._wakeup:
            if self._stopping:
                raise EngineFailure("the inference engine is shut down")
            self._waiting.append(stream)
            self._wakeup.notify_all()
        return stream

    def generate(self, prompt_token_ids, params: SamplingParams) -> GenerationResult:
        return self.submit(prompt_token_ids, params, incremental=False).result()

    def abort(self, request_id: str) -> None:
        self._post(_Abort(request_id))

    def _bounded(self, prompt: tuple[int, ...], params: SamplingParams) -> SamplingParams:
        if not prompt:
            raise ValueError("the prompt is empty")
        if params.n > self.max_batch_size:
            raise ValueError(f"n={params.n} exceeds the engine's batch size of {self.max_batch_size}")
        vocab = self.model.config.vocab_size
        if any(token >= vocab or token < 0 for token in prompt):
            raise ValueError(f"prompt token ids must be in [0, {vocab})")
        room = self.max_model_len - len(prompt)
        if params.max_tokens is None and room >= 1:
            return dataclasses.replace(params, max_tokens=room)
        if params.max_tokens is None or params.max_tokens > room:
            requested = len(prompt) + (params.max_tokens or 1)
            raise ContextLengthError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                f"{requested} tokens ({len(prompt)} in the prompt, {requested - len(prompt)} in the completion). "
                "Please reduce the length of the prompt or of max_tokens."
            )
        return params

    # ---- administration ----------------------------------------------------------------------------------

    def pause(self, timeout: float = 30.0) -> None:
        """Stop at the next step boundary: running and new requests wait (none fail) until resume()."""
        command = _Pause()
        self._post(command)
        if not command.applied.wait(timeout):
            raise TimeoutError("the engine did not reach a step boundary in time")

    def resume(self) -> None:
        with self._wakeup:
            self._paused = False
            self._wakeup.notify_all()

    def load_checkpoint(
        self, model_dir, *, version: int | None = None, timeout: float = 60.0, recompute_kv: bool = True
    ) -> SwapReport:
        """Load new weights beside the serving ones, then swap them in at a step boundary. In-flight
        sequences' KV caches are recomputed under the new weights, or kept (recompute_kv=False), which
        spares a prefill of every running context per swap."""
        with self._load_lock:
            path = Path(model_dir)
            if not (path / "config.json").is_file():
                raise CheckpointRefused(
                    422, f"{model_dir} is not a Hugging Face model directory (no config.json)"
                )
            started = time.perf_counter()
            try:
                fingerprint = tokenizer_fingerprint(path)
            except Exception as error:
                raise CheckpointRefused(422, f"cannot read the tokenizer in {model_dir}: {error}") from error
            if fingerprint != self.tokenizer_fingerprint:
                raise CheckpointRefused(
                    409,
                    f"tokenizer of {model_dir} differs from the serving one (fingerprint {fingerprint[:12]} != "
                    f"{self.tokenizer_fingerprint[:12]}); version {self.version} keeps serving",
                )
            try:
                model = self._load_model(path)
            except Exception as error:
                raise CheckpointRefused(422, f"cannot load weights from {model_dir}: {error}") from error
            loaded = time.perf_counter()
            previous = self.version
            swap = _Swap(
                model=model,
                version=previous + 1 if version is None else version,
                model_dir=str(path),
                recompute=recompute_kv,
            )
            self._post(swap)
            if not swap.applied.wait(timeout):
                raise TimeoutError("the engine did not reach a step boundary in time")
            return SwapReport(
                previous_version=previous,
                version=swap.version,
                model_dir=str(path),
                load_seconds=loaded - started,
                swap_seconds=time.perf_counter() - loaded,
                recomputed_sequences=swap.recomputed_sequences,
            )

    def status(self) -> EngineStatus:
        with self._wakeup:
            return EngineStatus(
                self.version, self.model_dir, self._paused, len(self._running), len(self._waiting)
            )

    def stats(self) -> EngineStats:
        with self._wakeup:
            return EngineStats(
                decode_steps=self._decode_steps,
                prefills=self._prefills,
                generated_tokens=self._generated_tokens,
                swaps=self._swaps,
                max_decode_batch_size=max(self._decode_batch_sizes, default=0),
                decode_batch_sizes=dict(sorted(self._decode_batch_sizes.items())),
                prefill_tokens=self._prefill_tokens,
                prefix_hit_tokens=self._prefix_hit_tokens,
            )

    def reset_stats(self) -> None:
        self._decode_steps = self._prefills = self._generated_tokens = self._swaps = 0
        self._prefill_tokens = self._prefix_hit_tokens = 0
        self._decode_batch_sizes: Counter = Counter()

    def token_text(self, token_id: int) -> str:
        text = self._token_texts.get(token_id)
        if text is None:
            text = self._token_texts[token_id] = self._backend.decode([token_id], skip_special_tokens=False)
        return text

    def _post(self, command) -> None:
        with self._wakeup:
            self._commands.append(command)
            self._wakeup.notify_all()

    def _load_model(self, model_dir):
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
        return AutoModelForCausalLM.from_pretrained(model_dir, dtype=self.dtype).eval()

    def _end_token_ids(self) -> frozenset[int]:
        ids: set[int] = set()
        for source in (getattr(self.model, "generation_config", None), self.model.config):
            value = getattr(source, "eos_token_id", None)
            ids.update(value if isinstance(value, (list, tuple)) else [value] if value is not None else [])
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        return frozenset(ids)

    # ---- the engine thread -------------------------------------------------------------------------------

    def _run(self) -> None:
        with torch.inference_mode():
            while True:
                with self._wakeup:
                    while not (self._stopping or self._commands or (not self._paused and self._has_work())):
                        self._wakeup.wait()
                    if self._stopping:
                        break
                    commands = list(self._commands)
                    self._commands.clear()
                for command in commands:
                    try:
                        self._apply(command)
                    except Exception as error:  # e.g. recomputing caches on a swap: fail those, serve on
                        self._fail_all(
                            [], EngineFailure(f"{type(command).__name__[1:].lower()} failed: {error!r}")
                        )
                with self._wakeup:
                    if self._paused:
                        continue
                    admitted = self._admissible()
                try:
                    self._step(admitted)
                except Exception as error:  # keep serving: fail only the requests this step touched
                    self._fail_all(admitted, EngineFailure(f"generation failed: {error!r}"))
        self._fail_all(list(self._waiting), EngineFailure("the inference engine shut down"))

    def _has_work(self) -> bool:
        return bool(self._waiting or self._running)

    def _admissible(self) -> list[RequestStream]:
        admitted, rows = [], len(self._running)
        while self._waiting and rows + self._waiting[0].params.n <= self.max_batch_size:
            stream = self._waiting.popleft()
            admitted.append(stream)
            rows += stream.params.n
        return admitted

    def _apply(self, command) -> None:
        if isinstance(command, _Pause):
            with self._wakeup:
                self._paused = True
            command.applied.set()
        elif isinstance(command, _Abort):
            self._abort(command.request_id)
        elif isinstance(command, _Swap):
            try:
                self.model, self.version = command.model, command.version
                self.model_dir = command.model_dir
                if self._prefix_cache is not None:  # its keys and values are the old weights'
                    warm = self._prefix_cache.most_recent()
                    self._prefix_cache.clear()
                    if warm is not None:  # stored again, under the new weights
                        self._remember([warm], *self._prefill([warm])[:2])
                self._swaps += 1
                if command.recompute:
                    command.recomputed_sequences = len(self._running)
                    self._recompute_running_caches()
            finally:
                command.applied.set()

    def _abort(self, request_id: str) -> None:
        with self._wakeup:
            waiting = [stream for stream in self._waiting if stream.request_id == request_id]
            for stream in waiting:
                self._waiting.remove(stream)
        for stream in waiting:
            stream.deliver([_abort_event(index) for index in range(stream.params.n)])
        keep = [row for row, sequence in enumerate(self._running) if sequence.stream.request_id != request_id]
        aborted = [sequence for sequence in self._running if sequence.stream.request_id == request_id]
        if aborted:
            aborted[0].stream.deliver([_abort_event(sequence.choice_index) for sequence in aborted])
            self._running = [self._running[row] for row in keep]
            self._batch.keep_rows(keep)

    def _fail_all(self, admitted: list[RequestStream], failure: EngineFailure) -> None:
        streams = {sequence.stream for sequence in self._running} | set(admitted)
        for stream in streams:
            stream.deliver(failure)
        self._running = []
        self._batch = PaddedBatchCache(self.model.config)


def _abort_event(choice_index: int) -> TokenEvent:
    return TokenEvent(choice_index, None, None, (), None, "", finish_reason="abort")
