"""Per-token log-probabilities of a micro-batch, computing the output head only where the loss needs it.

Three layouts (TrainConfig.layout):

- "packed": the sequences concatenated into one row (workers.rl.packing): restarting position ids, and
  attention kept inside each sequence by flash-attention varlen kernels (CUDA) or a block-diagonal 4-D
  mask. No padding at all; with varlen kernels attention costs sum(n_i^2).
- "padded": the sequences right-padded to the longest of the micro-batch, [B, L] with a 2-D mask.
  Micro-batches are planned by length (longest first), so the padding stays small.
- "prefix": the context a sequence starts with (every token before its first generated one, less the
  last) runs once for all the sequences that start with it, the G samples of a GRPO group sharing their
  prompt: one padded pass over the distinct contexts keeps their keys and values, a second padded pass
  runs each sequence's tail (the prompt's last token and what follows) on top of its context's.
  Gradients reach the context from every sequence that reads it, so the result and its gradients equal
  the padded layout's; what is saved is (G - 1) prompt forwards and backwards per group. A micro-batch
  in which no prefix is shared runs padded.
- "auto" (default): packed where a varlen kernel runs (flash attention); otherwise prefix on a CPU and
  padded on a GPU (measured faster there), and padded when gradient checkpointing is on (a recomputed layer
  would append its keys to the shared cache twice).
  Without a varlen kernel the block-diagonal mask makes attention cost (sum n_i)^2, which on CPU
  outweighs the padding saved.

Either way the model runs with `logits_to_keep` = the positions whose next token is in the loss mask, so
the LM head and the log-softmax run on generated tokens only (prompt and tool tokens need no logits).
The result is aligned with the concatenated ids, 0 wherever no logprob was computed.
"""

from collections.abc import Sequence

import torch

from workers.engines.config import LAYOUTS
from workers.rl.packing import block_causal_mask, pack_sequences, resolve_attention


def resolve_layout(model, layout: str, attention: str = "auto") -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}")
    checkpointing = bool(getattr(model, "is_activation_checkpointing", False))
    if layout == "prefix" and checkpointing:
        raise ValueError("layout 'prefix' cannot run with gradient checkpointing; use 'padded' or 'auto'")
    if layout != "auto":
        return layout
    if resolve_attention(model, attention) == "varlen":
        return "packed"
    # The shared-prefix layout saves arithmetic, which is what a CPU lacks; on a GPU its second forward per
    # micro-batch costs more than it saves (bench/gpu/README.md: padded 1.72x prefix on an H100).
    first = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
    on_gpu = first is not None and first.device.type == "cuda"
    return "padded" if checkpointing or on_gpu else "prefix"


def shared_prefix_length(sequence: Sequence[int], loss_mask: Sequence[int]) -> int:
    """The context a sequence can share: its tokens before the first generated one (at least one token;
    the whole sequence when nothing in it is generated)."""
    for position in range(1, len(sequence)):
        if loss_mask[position]:
            return position
    return len(sequence)


def plan_micro_batches(
    sequences: Sequence[Sequence[int]], loss_masks: Sequence[Sequence[int]], budget: int, layout: str
) -> list[list[int]]:
    """Indices per micro-batch: packed rows of at most `budget` tokens; padded batches whose
    count × longest stays within `budget` (longest first, so similar lengths share a batch); or, for
    "prefix", sequences kept together with the others of their prefix, within the same budget counted as
    the two passes pad (distinct prefixes × longest prefix + count × longest remainder)."""
    lengths = [len(sequence) for sequence in sequences]
    if layout == "packed":
        from workers.rl.packing import plan_rows

        return [list(row) for row in plan_rows(lengths, budget)]
    if layout == "prefix":
        return _plan_prefix_batches(sequences, loss_masks, budget)
    batches: list[list[int]] = []
    for index in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        if batches and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= budget:
            batches[-1].append(index)
        else:
            batches.append([index])
    return batches


def _plan_prefix_batches(sequences, loss_masks, budget: int) -> list[list[int]]:
    groups: dict[tuple[int, ...], list[int]] = {}
    for index, (sequence, loss_mask) in enumerate(zip(sequences, loss_masks, strict=True)):
        groups.setdefault(tuple(sequence[: shared_prefix_length(sequence, loss_mask)]), []).append(index)
    batches: list[list[int]] = []
    keys: set = set()
    longest_prefix = longest_rest = 0
    for key, members in groups.items():
        for index in sorted(members, key=lambda i: (-len(sequences[i]), i)):
            rest = len(sequences[index]) - len(key)
            grown = (len(keys | {key})) * max(longest_prefix, len(key)) + (
                len(batches[-1]) + 1 if batches else 1
            ) * max(longest_rest, rest)
            if batches and grown <= budget:
                batches[-1].append(index)
                keys.add(key)
                longest_prefix, longest_rest = max(longest_prefix, len(key)), max(longest_rest, rest)
            else:
                batches.append([index])
                keys, longest_prefix, longest_rest = {key}, len(key), rest
    return batches


def micro_batch_logprobs(
    model,
    sequences: Sequence[Sequence[int]],
    loss_masks: Sequence[Sequence[int]],
    *,
    layout: str,
    attention: str = "auto",
    temperature: float = 1.0,
) -> torch.Tensor:
    """[sum of lengths] logprobs of the concatenated sequences, exact at loss-mask positions, 0 elsewhere."""
    device = next(model.parameters()).device
    lengths = [len(sequence) for sequence in sequences]
    if layout == "prefix":
        prefixes = [
            tuple(sequence[: shared_prefix_length(sequence, loss_mask)])
            for sequence, loss_mask in zip(sequences, loss_masks, strict=True)
        ]
        if len(set(prefixes)) < len(prefixes):
            return _prefix_logprobs(model, sequences, loss_masks, prefixes, temperature)
    if layout == "packed":
        row = pack_sequences(sequences)
        mask = torch.tensor([m for loss_mask in loss_masks for m in loss_mask], dtype=torch.bool)
        starts = torch.zeros_like(mask)
        starts[row.starts] = True
        targets = torch.nonzero(mask & ~starts).squeeze(-1)
        out = torch.zeros(row.total, device=device)
        if targets.numel() == 0:
            return out
        kwargs = {
            "input_ids": row.input_ids.to(device),
            "position_ids": row.position_ids.to(device),
            "use_cache": False,
            "logits_to_keep": (targets - 1).to(device),
        }
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
        ids[b, : len(sequence)] = torch.tensor(sequence, dtype=torch.long)
        attention_mask[b, : len(sequence)] = 1
        wanted[b, 1 : len(sequence)] = torch.tensor(loss_mask[1:], dtype=torch.bool)
    columns = torch.nonzero(wanted.any(0)).squeeze(-1)  # target positions any row needs
    full = torch.zeros(len(sequences), width, device=device)
    if columns.numel():
        logits = model(
            input_ids=ids.to(device),
            attention_mask=attention_mask.to(device),
            use_cache=False,
            logits_to_keep=(columns - 1).to(device),
        ).logits  # [B, K, V]
        picked = _picked(logits, ids[:, columns].to(device), temperature)
        full = _scatter_columns(full, columns.to(device), picked)
        full = torch.where(wanted.to(device), full, torch.zeros_like(full))  # other rows' columns
    return torch.cat([full[b, :length] for b, length in enumerate(lengths)])


def _prefix_logprobs(model, sequences, loss_masks, prefixes, temperature: float) -> torch.Tensor:
    """The "prefix" layout. A sequence's context is its prefix less the prefix's last token; pass 1 runs
    the distinct contexts (right-padded) and keeps every layer's keys and values (its logits are not used,
    so no gradient flows through the output head there); pass 2 runs every tail (the prefix's last token
    and what follows, right-padded) on its context's keys and values, positions continuing from the
    context's length. Every logprob, the first generated token's included, comes from pass 2, so the
    output head, its log-softmax and their backward run once, over generated positions only."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    lengths = [len(sequence) for sequence in sequences]
    starts = [sum(lengths[:index]) for index in range(len(lengths))]
    total = sum(lengths)
    live = [i for i, prefix in enumerate(prefixes) if len(prefix) < lengths[i]]  # something generated
    if not live:
        return torch.zeros(total, device=device)
    contexts = {i: tuple(sequences[i][: len(prefixes[i]) - 1]) for i in live}
    distinct: dict[tuple[int, ...], int] = {}
    for i in live:
        if contexts[i]:
            distinct.setdefault(contexts[i], len(distinct))
    if not distinct:  # every prefix is a single token: nothing to share
        return micro_batch_logprobs(model, sequences, loss_masks, layout="padded", temperature=temperature)
    context_width = max(len(context) for context in distinct)
    context_ids = torch.zeros(len(distinct), context_width, dtype=torch.long)
    context_mask = torch.zeros(len(distinct), context_width, dtype=torch.long)
    for context, row in distinct.items():
        context_ids[row, : len(context)] = torch.tensor(context, dtype=torch.long)
        context_mask[row, : len(context)] = 1
    first = model(
        input_ids=context_ids.to(device),
        attention_mask=context_mask.to(device),
        use_cache=True,
        logits_to_keep=1,
    )
    # a sequence with an empty context reads row 0's keys and values fully masked
    rows = torch.tensor([distinct.get(contexts[i], 0) for i in live])
    offsets = torch.tensor([len(contexts[i]) for i in live])
    read_mask = context_mask[rows] * (offsets > 0).unsqueeze(1)

    tail_width = max(lengths[i] - len(contexts[i]) for i in live)
    tail_ids = torch.zeros(len(live), tail_width, dtype=torch.long)
    tail_mask = torch.zeros(len(live), tail_width, dtype=torch.long)
    wanted = torch.zeros(len(live), tail_width, dtype=torch.bool)  # column t predicts tail token t + 1
    for r, i in enumerate(live):
        tail = sequences[i][len(contexts[i]) :]
        tail_ids[r, : len(tail)] = torch.tensor(tail, dtype=torch.long)
        tail_mask[r, : len(tail)] = 1
        wanted[r, : len(tail) - 1] = torch.tensor(loss_masks[i][len(contexts[i]) + 1 :], dtype=torch.bool)
    cache = DynamicCache(
        ddp_cache_data=[
            (layer.keys.index_select(0, rows.to(device)), layer.values.index_select(0, rows.to(device)))
            for layer in first.past_key_values.layers
        ]
    )
    columns = torch.nonzero(wanted.any(0)).squeeze(-1)
    out = torch.zeros(total, device=device)
    if not columns.numel():
        return out
    logits = model(
        input_ids=tail_ids.to(device),
        past_key_values=cache,
        use_cache=False,
        attention_mask=torch.cat([read_mask, tail_mask], dim=1).to(device),
        position_ids=(offsets.unsqueeze(1) + torch.arange(tail_width)).to(device),
        logits_to_keep=columns.to(device),
    ).logits  # [N, K, V]
    picked = _picked(logits, tail_ids[:, columns + 1].to(device), temperature)
    keep = wanted[:, columns]
    flat = (torch.tensor([starts[i] for i in live]) + offsets).unsqueeze(1) + columns + 1
    return out.index_put((flat[keep].to(device),), picked[keep.to(device)])


def _scatter_columns(full: torch.Tensor, columns: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    index = columns.unsqueeze(0).expand(full.shape[0], -1)
    return full.scatter(1, index, values)


def _picked(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    """log softmax(logits / temperature) at `targets` (float32), differentiable: see TargetLogprob."""
    return TargetLogprob.apply(logits, targets, float(temperature))


ROW_BLOCK_ELEMENTS = 1 << 20  # a block of rows of about 4 MB in float32


class TargetLogprob(torch.autograd.Function):
    """log softmax(logits / T)[..., target] over the last dimension, in float32 whatever the logits' dtype.

    The same values and gradients as `gather(log_softmax(x / T), target)`, computed a block of rows at a
    time: the forward keeps only the logits (as autograd would) and one logsumexp per row, and the backward
    writes the gradient, (onehot(target) - softmax(x / T)) * g / T, straight into its one output tensor.
    Autograd's own path allocates several temporaries the size of the logits (rows x vocabulary: 50 MB for
    256 positions of a 49k vocabulary) in each direction."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
        vocabulary = logits.shape[-1]
        flat = logits.reshape(-1, vocabulary)
        index = targets.reshape(-1, 1)
        rows = max(1, ROW_BLOCK_ELEMENTS // vocabulary)
        logsumexp = torch.empty(flat.shape[0], dtype=torch.float32, device=flat.device)
        for start in range(0, flat.shape[0], rows):
            block = flat[start : start + rows].float()
            if temperature != 1.0:
                block = block / temperature
            logsumexp[start : start + rows] = torch.logsumexp(block, dim=-1)
        picked = flat.gather(1, index).squeeze(1).float() / temperature - logsumexp
        ctx.save_for_backward(logits, targets, logsumexp)
        ctx.temperature = temperature
        return picked.reshape(logits.shape[:-1])

    @staticmethod
    def backward(ctx, *grad_outputs: torch.Tensor):
        logits, targets, logsumexp = ctx.saved_tensors
        temperature = ctx.temperature
        vocabulary = logits.shape[-1]
        flat = logits.reshape(-1, vocabulary)
        scale = grad_outputs[0].reshape(-1, 1).float() / temperature  # g / T per row
        grad = torch.empty_like(flat)
        rows = max(1, ROW_BLOCK_ELEMENTS // vocabulary)
        for start in range(0, flat.shape[0], rows):
            end = start + rows
            block = flat[start:end].float()
            if temperature != 1.0:
                block = block / temperature
            if grad.dtype == torch.float32:
                probabilities = torch.sub(block, logsumexp[start:end, None], out=grad[start:end])
            else:
                probabilities = block - logsumexp[start:end, None]
            probabilities.exp_().mul_(-scale[start:end])
            if probabilities.data_ptr() != grad[start:end].data_ptr():
                grad[start:end] = probabilities
        grad.scatter_add_(1, targets.reshape(-1, 1), scale.to(grad.dtype))
        return grad.reshape(logits.shape), None, None


def _dtype(model) -> torch.dtype:
    return getattr(model, "dtype", None) or next(model.parameters()).dtype
