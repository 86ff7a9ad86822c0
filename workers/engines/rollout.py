"""Sampling groups of completions from a trainer's current weights, as training samples.

For on-policy loops that run without an inference server (tests, the trainer benchmark, toy tasks):
`model.generate` samples `group_size` completions per prompt (plain multinomial sampling at
`temperature`, no top-k / top-p), and each completion token's behaviour logprob is read from the
sampling distribution itself (the processed scores), so the GRPO / PPO ratio starts at 1.
"""

from collections.abc import Callable, Sequence

import torch

from workers.rl.samples import TrainingSample


@torch.no_grad()
def sample_groups(
    model,
    prompts: Sequence[Sequence[int]],
    *,
    group_size: int,
    max_new_tokens: int,
    reward: Callable[[list[int]], float],
    temperature: float = 1.0,
    policy_version: int = 0,
    fixed_length: bool = True,
    seed: int | None = None,
    prefix: str = "s",
) -> list[TrainingSample]:
    """`group_size` samples per prompt, grouped by prompt. With `fixed_length`, end-of-sequence is
    suppressed so that every completion has exactly `max_new_tokens` tokens (comparable benchmarks)."""
    if seed is not None:
        torch.manual_seed(seed)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    samples: list[TrainingSample] = []
    try:
        for index, prompt in enumerate(prompts):
            input_ids = torch.tensor([list(prompt)] * group_size, dtype=torch.long, device=device)
            output = model.generate(
                input_ids=input_ids,
                attention_mask=torch.ones_like(input_ids),
                do_sample=True,
                temperature=temperature,
                top_k=0,
                top_p=1.0,
                max_new_tokens=max_new_tokens,
                min_new_tokens=max_new_tokens if fixed_length else 0,
                output_scores=True,
                return_dict_in_generate=True,
                pad_token_id=model.config.pad_token_id,
            )
            completions = output.sequences[:, input_ids.shape[1] :]
            scores = torch.stack(output.scores, dim=1).float().log_softmax(-1)  # [G, T, V]
            chosen = torch.gather(scores, -1, completions.unsqueeze(-1)).squeeze(-1)
            for member in range(group_size):
                completion = completions[member].tolist()
                logprobs = chosen[member].tolist()
                pad = model.config.pad_token_id
                if not fixed_length and pad is not None and pad in completion:  # finished early: drop padding
                    end = completion.index(pad) + 1
                    completion, logprobs = completion[:end], logprobs[:end]
                length = len(prompt) + len(completion)
                samples.append(
                    TrainingSample(
                        input_ids=tuple(prompt) + tuple(completion),
                        loss_mask=(0,) * len(prompt) + (1,) * len(completion),
                        logprobs=(0.0,) * len(prompt) + tuple(logprobs),
                        versions=(-1,) * len(prompt) + (policy_version,) * len(completion),
                        turns=(0,) * length,
                        reward=float(reward(completion)),
                        group_id=f"{prefix}-p{index}",
                        task_id=f"p{index}",
                        trajectory_id=f"{prefix}-p{index}-{member}",
                        step_ids=(f"{prefix}-{index}",),
                    )
                )
    finally:
        model.train(was_training)
    return samples
