import pytest


@pytest.fixture(scope="session")
def default_model_dir(tmp_path_factory):
    from transformers.utils import logging as transformers_logging

    from workers.inference.modelgen import create_default_model

    transformers_logging.disable_progress_bar()
    return create_default_model(tmp_path_factory.mktemp("training-default-model"), seed=0)
