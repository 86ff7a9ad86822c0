"""Per-token log-probabilities of a micro-batch, computing the output head only where the loss needs it.

Two layouts (TrainConfig.layout):

- "packed": the sequences concatenated into one row (workers.rl.packing): restarting position ids, and
  attention kept inside each sequence by flash-attention varlen kernels (CUDA) or a block-diagonal 4-D
  mask. No padding at all; with varlen kernels attention costs sum(n_i^2).
- "padded": the sequences right-padded to the longest of the micro-batch, [B, L] with a 2-D mask.
  Micro-batches are planned by length (longest first), so the padding stays small.
- "auto" (default): packed where a varlen kernel runs (flash attention), padded otherwise: without one,
  the block-diagonal mask makes attention cost (sum n_i)^2, which on CPU outweighs the padding saved.

Either way the model runs with `logits_to_keep` = the positions whose next token is in the loss mask, so
the LM head and the log-softmax run on generated tokens only (prompt and tool tokens need no logits).
The result is aligned with the concatenated ids, 0 wherever no logprob was computed.
"""

from collections.abc import Sequence

import torch

from workers.rl.packing import block_causal_mask, pack_sequences, resolve_attention

LAYOUTS = ("auto", "packed", "padded")


def resolve_layout(model, layout: str, attention: str = "auto") -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}")
    if layout != "auto":
        return layout
    return "packed" if resolve_attention(model, attention) == "varlen" else "padded"


def plan_micro_batches(lengths: Sequence[int], budget: int, layout: str) -> list[list[int]]:
    """Indices per micro-batch: packed rows of at most `budget` tokens, or padded batches whose
    count × longest stays within `budget` (longest first, so similar lengths share a batch)."""
    if layout == "packed":
        from workers.rl.packing import plan_rows

        return [list(row) for row in plan_rows(lengths, budget)]
    batches: list[list[int]] = []
    for index in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        if batches and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= budget:
            batches[-1].append(index)
        else:
            batches.append([index])
    return batches


def micro_batch_logprobs(model, sequences: Sequence[Sequence[int]], loss_masks: Sequence[Sequence[int]], *,
                         layout: str, attention: str = "auto", temperature: float = 1.0) -> torch.Tensor:
    """[sum of lengths] logprobs of the concatenated sequences, exact at loss-mask positions, 0 elsewhere."""
    device = next(model.parameters()).device
    lengths = [len(sequence) for sequence in sequences]
    if layout == "packed":
        row = pack_sequences(sequences)
        mask = torch.tensor([m for loss_mask in loss_masks for m in loss_mask], dtype=torch.bool)
        starts = torch.zeros_like(mask)
        starts[row.starts] = True
        targets = torch.nonzero(mask & ~starts).squeeze(-1)
        out = torch.zeros(row.total, device=device)
        if targets.numel() == 0:
            return out
        kwargs = {"input_ids": row.input_ids.to(device), "position_ids": row.position_ids.to(device),
                  "use_cache": False, "logits_to_keep": (targets - 1).to(device)}
        if resolve_attention(model, attention) == "mask":
            kwargs["attention_mask"] = block_causal_mask(row.lengths, dtype=_dtype(model), device=device)
        logits = model(**kwargs).logits[0]
        picked = _picked(logits, row.input_ids[0, targets].to(device), temperature)
        return out.index_put((targets.to(device),), picked)

    width = max(lengths)
    ids = torch.zeros(len(sequences), width, dtype=torch.long)
    attention_mask = torch.zeros(len(sequences), width, dtype=torch.long)
    wanted = torch.zeros(len(sequences), width, dtype=torch.bool)
    for b, (sequence, loss_mask) in enumerate(zip(sequences, loss_masks, strict=True)):
        ids[b, :len(sequence)] = torch.tensor(sequence, dtype=torch.long)
        attention_mask[b, :len(sequence)] = 1
        wanted[b, 1:len(sequence)] = torch.tensor(loss_mask[1:], dtype=torch.bool)
    columns = torch.nonzero(wanted.any(0)).squeeze(-1)  # target positions any row needs
    full = torch.zeros(len(sequences), width, device=device)
    if columns.numel():
        logits = model(input_ids=ids.to(device), attention_mask=attention_mask.to(device), use_cache=False,
                       logits_to_keep=(columns - 1).to(device)).logits  # [B, K, V]
        picked = _picked(logits, ids[:, columns].to(device), temperature)
        full = _scatter_columns(full, columns.to(device), picked)
        full = torch.where(wanted.to(device), full, torch.zeros_like(full))  # other rows' columns
    return torch.cat([full[b, :length] for b, length in enumerate(lengths)])


def _scatter_columns(full: torch.Tensor, columns: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    index = columns.unsqueeze(0).expand(full.shape[0], -1)
    return full.scatter(1, index, values)


def _picked(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    return torch.gather(logits, -1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def _dtype(model) -> torch.dtype:
    return getattr(model, "dtype", None) or next(model.parameters()).dtype
