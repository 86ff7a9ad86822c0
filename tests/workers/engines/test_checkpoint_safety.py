"""Resuming from a checkpoint never runs code from it: the trainer state is loaded with
`torch.load(weights_only=True)`, so a planted pickle that would execute on load is refused. Checkpoints
written before the numpy RNG state was stored as a tensor still resume."""

import os
import pickle

import numpy
import pytest
import torch

from workers.engines import TrainConfig, Trainer
from workers.engines.checkpoints import STATE_FILE


class _RunsOnLoad:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def test_a_checkpoint_that_would_run_code_on_load_is_refused(model_dir, tmp_path):
    trainer = Trainer(model_dir, TrainConfig(algorithm="sft", learning_rate=1e-3))
    info = trainer.checkpoint(tmp_path / "run")
    state = torch.load(
        os.path.join(info.path, STATE_FILE), map_location="cpu", weights_only=False
    )  # our own file
    marker = tmp_path / "code-ran"
    state["note"] = _RunsOnLoad(marker)
    torch.save(state, os.path.join(info.path, STATE_FILE))

    with pytest.raises(pickle.UnpicklingError):
        Trainer.resume(model_dir, info.path)
    assert not marker.exists()


def test_a_checkpoint_with_the_older_numpy_rng_state_still_resumes(model_dir, tmp_path):
    trainer = Trainer(model_dir, TrainConfig(algorithm="sft", learning_rate=1e-3))
    info = trainer.checkpoint(tmp_path / "run")
    path = os.path.join(info.path, STATE_FILE)
    state = torch.load(path, map_location="cpu", weights_only=False)  # our own file
    numpy.random.seed(5)
    state["rng"]["numpy"] = numpy.random.get_state()  # how checkpoints stored it before: an ndarray inside
    torch.save(state, path)
    expected = numpy.random.random()
    resumed = Trainer.resume(model_dir, info.path)
    assert resumed.step_count == 0
    assert numpy.random.random() == expected
