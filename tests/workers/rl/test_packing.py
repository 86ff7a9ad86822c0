"""Packing three sequences into one row gives the same per-token logprobs, the same decoupled PPO loss and
the same gradient as running them one by one (and as a padded batch), in float32 on the default model."""

import pytest
import torch

from workers.rl.losses import PPOConfig, decoupled_ppo_loss, token_logprobs
from workers.rl.packing import (
    block_causal_mask,
    pack_sequences,
    pack_values,
    packed_token_logprobs,
    plan_rows,
    resolve_attention,
    unpack,
)

LENGTHS = (9, 14, 6)


def sequences(vocab: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(7)
    return [torch.randint(3, vocab, (length,), generator=generator).tolist() for length in LENGTHS]


def ppo_inputs(logps: list[torch.Tensor]):
    """Per sequence: 3 context tokens then generated ones; stale behaviour, near proximal, +-1 advantages."""
    generator = torch.Generator().manual_seed(11)
    masks, prox, behav, adv = [], [], [], []
    for index, logp in enumerate(logps):
        length = logp.numel()
        masks.append(torch.tensor([0] * 3 + [1] * (length - 3)))
        prox.append(logp.detach() + 0.1 * torch.randn(length, generator=generator))
        behav.append(logp.detach() + 0.5 * torch.randn(length, generator=generator))
        adv.append(torch.full((length,), 1.0 if index % 2 == 0 else -1.0))
    return masks, prox, behav, adv


def loss_of(logps: list[torch.Tensor], inputs) -> torch.Tensor:
    masks, prox, behav, adv = inputs
    loss, _ = decoupled_ppo_loss(
        torch.cat(logps),
        torch.cat(prox),
        torch.cat(behav),
        torch.cat(adv),
        torch.cat(masks),
        PPOConfig(eps_clip=0.2, behaviour_weight_cap=5.0),
    )
    return loss


def one_by_one(model, seqs) -> list[torch.Tensor]:
    return [
        token_logprobs(model(input_ids=torch.tensor([seq])).logits, torch.tensor([seq]))[0] for seq in seqs
    ]


@pytest.mark.parametrize("attention", ["mask", "varlen"])
def test_packed_equals_unpacked_logprobs_loss_and_gradient(default_model, attention):
    model = default_model
    seqs = sequences(model.config.vocab_size)
    row = pack_sequences(seqs)
    assert row.position_ids[0].tolist() == [*range(9), *range(14), *range(6)]
    assert row.cu_seqlens.tolist() == [0, 9, 23, 29]

    reference = one_by_one(model, seqs)
    packed = unpack(packed_token_logprobs(model, row, attention=attention), row)
    for expected, got in zip(reference, packed, strict=True):
        assert got.dtype == torch.float32
        assert torch.allclose(got, expected, atol=1e-5, rtol=0)
        assert got[0] == 0.0

    inputs = ppo_inputs([logp.detach() for logp in reference])
    model.zero_grad()
    loss_ref = loss_of(one_by_one(model, seqs), inputs)
    loss_ref.backward()
    grads_ref = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    loss_packed = loss_of(unpack(packed_token_logprobs(model, row, attention=attention), row), inputs)
    loss_packed.backward()
    assert abs(float(loss_packed) - float(loss_ref)) < 1e-5
    assert float(loss_ref) != 0.0
    for expected, param in zip(grads_ref, model.parameters(), strict=True):
        assert torch.allclose(param.grad, expected, atol=1e-5, rtol=1e-4)


def test_packed_equals_padded_batch(default_model):
    model = default_model
    seqs = sequences(model.config.vocab_size)
    width = max(LENGTHS)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    attention = torch.zeros(len(seqs), width, dtype=torch.long)
    for index, seq in enumerate(seqs):
        ids[index, : len(seq)] = torch.tensor(seq)
        attention[index, : len(seq)] = 1
    padded = token_logprobs(model(input_ids=ids, attention_mask=attention).logits, ids)
    row = pack_sequences(seqs)
    packed = unpack(packed_token_logprobs(model, row), row)
    for index, logp in enumerate(packed):
        assert torch.allclose(logp, padded[index, : LENGTHS[index]], atol=1e-5, rtol=0)
    inputs = ppo_inputs(packed)
    padded_rows = [padded[index, : LENGTHS[index]] for index in range(len(seqs))]
    assert abs(float(loss_of(packed, inputs)) - float(loss_of(padded_rows, inputs))) < 1e-5


def test_block_causal_mask_and_helpers(default_model):
    mask = block_causal_mask([2, 1])[0, 0]
    low = torch.finfo(torch.float32).min
    assert mask.tolist() == [[0, low, low], [0, 0, low], [low, low, 0]]
    assert pack_values([[1.0, 2.0], torch.tensor([3.0])]).tolist() == [1.0, 2.0, 3.0]
    assert resolve_attention(default_model) == "mask"  # sdpa on CPU
    assert plan_rows([5, 3, 8, 2, 4], max_tokens=10) == ((2, 3), (0, 4), (1,))
    with pytest.raises(ValueError, match=r"a sequence is longer than max_tokens \(11 > 10\)"):
        plan_rows([11], max_tokens=10)
    with pytest.raises(ValueError, match="pack at least one sequence, none of them empty"):
        pack_sequences([[1], []])
