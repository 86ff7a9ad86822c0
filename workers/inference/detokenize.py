"""Incremental detokenization with stop strings, for streaming text out of a growing list of token ids."""

from dataclasses import dataclass

INCOMPLETE_CHARACTER = "\ufffd"  # what a byte-level decoder yields for a UTF-8 sequence cut in the middle


@dataclass(frozen=True)
class TextStep:
    delta: str
    stop_string: str | None  # the stop string that ended generation at this step, if any


class IncrementalDetokenizer:
    """Emits text deltas that never split a character and never show a prefix of a stop string."""

    def __init__(self, backend_tokenizer, stop: tuple[str, ...] = ()):
        self._backend = backend_tokenizer
        self._stop = tuple(s for s in stop if s)
        self._holdback = max((len(s) for s in self._stop), default=1) - 1
        self._token_ids: list[int] = []
        self._emitted = 0
        self.text = ""  # the final visible text so far (stop string excluded)

    def push(self, token_id: int) -> TextStep:
        self._token_ids.append(token_id)
        full = self._backend.decode(self._token_ids, skip_special_tokens=True)
        search_from = max(0, self._emitted - self._holdback)
        stop_hits = [(full.find(s, search_from), s) for s in self._stop]
        stop_hits = [(index, s) for index, s in stop_hits if index >= 0]
        if stop_hits:
            index, stop_string = min(stop_hits)
            return TextStep(self._advance(full[:index], len(full[:index])), stop_string)
        safe_end = len(full) - self._holdback if self._stop else len(full)
        while safe_end > self._emitted and full[safe_end - 1] == INCOMPLETE_CHARACTER:
            safe_end -= 1
        return TextStep(self._advance(full, safe_end), None)

    def flush(self) -> str:
        """The held-back remainder, once generation has ended without a stop string."""
        full = self._backend.decode(self._token_ids, skip_special_tokens=True)
        return self._advance(full, len(full))

    def _advance(self, full: str, end: int) -> str:
        if end <= self._emitted:
            return ""
        delta = full[self._emitted : end]
        self._emitted = end
        self.text = full[:end]
        return delta
