"""Token logprobs from a direct transformers forward pass, to check what vLLM serves against."""

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM


class ReferenceModel:
    def __init__(self, model_dir: str | Path, state_dict: dict[str, torch.Tensor] | None = None):
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        if state_dict is not None:
            missing, unexpected = self.model.load_state_dict(state_dict, strict=False)
            tied = {"lm_head.weight"} if self.model.config.tie_word_embeddings else set()
            assert not unexpected, (missing, unexpected)
            assert set(missing) <= tied, (missing, unexpected)

    @torch.no_grad()
    def token_logprobs(self, prompt_ids, completion_ids) -> list[float]:
        """log p(completion_ids[i] | prompt_ids + completion_ids[:i]) for every i, from raw logits."""
        ids = torch.tensor([list(prompt_ids) + list(completion_ids)])
        logits = self.model(input_ids=ids).logits[0].float()
        logprobs = torch.log_softmax(logits, dim=-1)
        start = len(prompt_ids)
        positions = torch.arange(start - 1, ids.shape[1] - 1)
        return logprobs[positions, ids[0, start:]].tolist()
