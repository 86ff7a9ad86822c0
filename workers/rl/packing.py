"""Sequence packing: several sequences in one row, no padding, attention kept inside each sequence.

A packed row concatenates the sequences' token ids; `position_ids` restart at 0 at each sequence
start (so rotary embeddings see every sequence at its own positions) and `cu_seqlens` holds the
cumulative boundaries [0, n1, n1 + n2, ...]. Attention must not cross a boundary, by one of:

- "varlen": pass only position_ids. Flash-attention kernels (attn_implementation flash_attention_2/3)
  turn the restarts into cu_seqlens and run varlen attention; transformers >= 5 also derives a
  per-sequence mask from the restarts for sdpa/eager when no attention_mask is given. No O(T^2) mask.
- "mask": a 4-D additive block-diagonal causal mask [1, 1, T, T] (0 where a query may attend, the
  dtype's minimum elsewhere), accepted as-is by transformers' eager and sdpa attention on any version.
- "auto" (default): varlen under a flash-attention implementation, else mask. Flash attention does not
  run on CPU, so CPU takes the mask path.

Per-token log-probabilities are aligned with the ids (workers.rl.losses.token_logprobs) and set to 0
at each sequence start: there, the logits before it belong to the previous sequence.
`plan_rows` bins sequences into rows of at most `max_tokens` (first-fit decreasing).
"""

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from workers.rl.losses import token_logprobs

ATTENTION_MODES = ("auto", "varlen", "mask")


@dataclass(frozen=True)
class PackedRow:
    input_ids: torch.Tensor  # [1, T] long
    position_ids: torch.Tensor  # [1, T] long, restarting at 0 per sequence
    cu_seqlens: torch.Tensor  # [n + 1] long
    lengths: tuple[int, ...]

    @property
    def total(self) -> int:
        return int(self.cu_seqlens[-1])

    @property
    def starts(self) -> torch.Tensor:
        return self.cu_seqlens[:-1]


def pack_sequences(sequences: Sequence[Sequence[int]]) -> PackedRow:
    lengths = tuple(len(sequence) for sequence in sequences)
    if not lengths or min(lengths) == 0:
        raise ValueError("pack at least one sequence, none of them empty")
    ids = torch.tensor([token for sequence in sequences for token in sequence], dtype=torch.long)
    positions = torch.cat([torch.arange(length, dtype=torch.long) for length in lengths])
    cu = torch.zeros(len(lengths) + 1, dtype=torch.long)
    cu[1:] = torch.cumsum(torch.tensor(lengths, dtype=torch.long), 0)
    return PackedRow(
        input_ids=ids.unsqueeze(0), position_ids=positions.unsqueeze(0), cu_seqlens=cu, lengths=lengths
    )


def pack_values(
    values: Sequence[Sequence[float] | torch.Tensor], dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Per-token values of the packed sequences, concatenated in the same order: [T]."""
    return torch.cat([torch.as_tensor(value, dtype=dtype).reshape(-1) for value in values])


def unpack(values: torch.Tensor, row: PackedRow) -> list[torch.Tensor]:
    """Split [T] or [1, T] per-token values back into one tensor per sequence."""
    return list(torch.split(values.reshape(-1), list(row.lengths)))


def block_causal_mask(
    lengths: Sequence[int], dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> torch.Tensor:
    """[1, 1, T, T] additive mask: 0 where query i may attend key j (same sequence, j <= i)."""
    sequence = torch.repeat_interleave(
        torch.arange(len(lengths), device=device), torch.tensor(list(lengths), device=device)
    )
    total = sequence.numel()
    causal = torch.ones(total, total, dtype=torch.bool, device=device).tril()
    allowed = causal & (sequence.unsqueeze(0) == sequence.unsqueeze(1))
    mask = torch.zeros(total, total, dtype=dtype, device=device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


def resolve_attention(model, attention: str = "auto") -> str:
    if attention not in ATTENTION_MODES:
        raise ValueError(f"attention must be one of {ATTENTION_MODES}")
    if attention != "auto":
        return attention
    implementation = getattr(model.config, "_attn_implementation", "") or ""
    return "varlen" if "flash" in implementation else "mask"


def packed_logits(model, row: PackedRow, *, attention: str = "auto") -> torch.Tensor:
    """Logits [1, T, V] of a transformers causal LM over a packed row."""
    device = next(model.parameters()).device
    kwargs = {
        "input_ids": row.input_ids.to(device),
        "position_ids": row.position_ids.to(device),
        "use_cache": False,
    }
    if resolve_attention(model, attention) == "mask":
        kwargs["attention_mask"] = block_causal_mask(row.lengths, dtype=model.dtype, device=device)
    return model(**kwargs).logits


def packed_token_logprobs(
    model, row: PackedRow, *, attention: str = "auto", temperature: float = 1.0
) -> torch.Tensor:
    """Per-token log-probabilities [T] of the packed ids, 0 at every sequence start."""
    logits = packed_logits(model, row, attention=attention)
    logp = token_logprobs(logits, row.input_ids.to(logits.device), temperature=temperature)[0]
    starts = torch.zeros_like(logp, dtype=torch.bool)
    starts[row.starts.to(logp.device)] = True
    return torch.where(starts, torch.zeros_like(logp), logp)


def plan_rows(lengths: Sequence[int], max_tokens: int) -> tuple[tuple[int, ...], ...]:
    """Indices of the sequences in each row, first-fit decreasing; every row totals <= max_tokens."""
    if any(length > max_tokens for length in lengths):
        raise ValueError(f"a sequence is longer than max_tokens ({max(lengths)} > {max_tokens})")
    rows: list[list[int]] = []
    room: list[int] = []
    for index in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        for row, free in enumerate(room):
            if lengths[index] <= free:
                rows[row].append(index)
                room[row] -= lengths[index]
                break
        else:
            rows.append([index])
            room.append(max_tokens - lengths[index])
    return tuple(tuple(sorted(row)) for row in rows)
