"""The default model (a ~4M-parameter Llama), made once per session into a temporary directory."""

import pytest
import torch

from workers.inference.modelgen import create_default_model


@pytest.fixture(scope="session")
def default_model_dir(tmp_path_factory):
    return create_default_model(tmp_path_factory.mktemp("rl-default-model"), seed=0)


@pytest.fixture
def default_model(default_model_dir):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32)
    model.eval()
    return model
