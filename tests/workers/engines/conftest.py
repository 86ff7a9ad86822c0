"""The default model (a ~4M-parameter Llama), made once per session; a toy reward it can learn on CPU."""

import pytest
import torch

from workers.inference.modelgen import VOCAB_SIZE, create_default_model

LOW_HALF = VOCAB_SIZE // 2


def low_half_reward(completion: list[int]) -> float:
    """Fraction of completion tokens from the lower half of the vocabulary: about 0.5 for the untrained
    (near-uniform) default model, 1.0 when it has learned to put its mass there."""
    return sum(1 for token in completion if token < LOW_HALF) / len(completion)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    torch.set_num_threads(2)
    return create_default_model(tmp_path_factory.mktemp("engine-default-model"), seed=0)
