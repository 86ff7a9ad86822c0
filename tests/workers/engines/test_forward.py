"""The engine's target-logprob op against the plain autograd formula: values and gradients, float32 and
bf16 logits, temperature 1 and not, row counts that are and are not a multiple of its block."""

import pytest
import torch

from workers.engines import forward
from workers.engines.forward import TargetLogprob


def reference(logits, targets, temperature):
    scaled = logits.float() / temperature
    return torch.gather(scaled.log_softmax(-1), -1, targets.unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("shape", [(3, 5, 1000), (7, 300)], ids=["batch", "rows"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_target_logprob_matches_log_softmax(monkeypatch, temperature, shape, dtype):
    monkeypatch.setattr(forward, "ROW_BLOCK_ELEMENTS", 4 * shape[-1])  # blocks of 4 rows: the last one short
    generator = torch.Generator().manual_seed(0)
    base = (torch.randn(*shape, generator=generator) * 3).to(dtype)
    targets = torch.randint(0, shape[-1], shape[:-1], generator=generator)
    weights = torch.randn(shape[:-1], generator=generator)
    expected_logits = base.clone().requires_grad_(True)
    expected = reference(expected_logits, targets, temperature)
    (expected * weights).sum().backward()
    got_logits = base.clone().requires_grad_(True)
    got = TargetLogprob.apply(got_logits, targets, temperature)
    (got * weights).sum().backward()
    assert got.dtype == torch.float32
    assert got.shape == shape[:-1]
    assert torch.allclose(got, expected, atol=1e-5)
    assert got_logits.grad.dtype == dtype
    tolerance = 1e-6 if dtype == torch.float32 else 1e-2
    assert torch.allclose(got_logits.grad.float(), expected_logits.grad.float(), atol=tolerance)
    assert torch.equal(got_logits.detach(), base)  # the logits are read, never written
