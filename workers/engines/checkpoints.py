"""What a training run keeps on disk: checkpoint directories, the `latest` pointer, the trainer state file
(loaded so that it cannot run code), the RNG states a checkpoint carries, and the base's tokenizer files an
export copies. The Trainer (workers.engines.trainer) builds the state; this module writes and reads it.

    run_dir/step-NNNNNN/trainer_state.pt   weights, optimizer, schedule, RNG, step, data position, config
    run_dir/step-NNNNNN/state.json         step, data position, config (readable without torch)
    run_dir/latest                         the name of the newest complete checkpoint
"""

import json
import os
import random
import shutil
from pathlib import Path

import torch

from workers.engines.config import CheckpointInfo

STATE_FILE = "trainer_state.pt"
LATEST_FILE = "latest"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "tokenizer.model",
)


def write_checkpoint(
    directory, state: dict, *, step: int, data_position: int, config: dict, keep: int
) -> CheckpointInfo:
    """Writes `directory/step-NNNNNN/` atomically (a temporary folder renamed), then points
    `directory/latest` at it, then prunes all but the newest `keep` checkpoints."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"step-{step:06d}"
    partial = directory / f".step-{step:06d}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    torch.save(state, partial / STATE_FILE)
    (partial / "state.json").write_text(
        json.dumps({"step": step, "data_position": data_position, "config": config}, indent=2) + "\n"
    )
    shutil.rmtree(final, ignore_errors=True)
    os.replace(partial, final)
    write_atomically(directory / LATEST_FILE, final.name)
    for old in sorted(directory.glob("step-*"))[:-keep] if keep else []:
        shutil.rmtree(old, ignore_errors=True)
    return CheckpointInfo(path=str(final), step=step, data_position=data_position)


def latest_checkpoint(directory) -> CheckpointInfo | None:
    """The checkpoint `directory/latest` names, or None when there is none (a fresh run)."""
    directory = Path(directory)
    pointer = directory / LATEST_FILE
    if not pointer.exists():
        return None
    path = directory / pointer.read_text().strip()
    if not (path / "state.json").exists():
        return None
    state = json.loads((path / "state.json").read_text())
    return CheckpointInfo(path=str(path), step=int(state["step"]), data_position=int(state["data_position"]))


def load_checkpoint_state(path: Path) -> dict:
    """The trainer state of a checkpoint, loaded with `weights_only=True`: tensors, containers and plain
    values only, so a planted file cannot run code (pickle.UnpicklingError). numpy's array reconstruction is
    allowed for checkpoints written before the numpy RNG state was stored as a tensor."""
    import numpy

    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # numpy 1.x
        from numpy.core.multiarray import _reconstruct  # type: ignore[no-redef]  # same function, older home

    with torch.serialization.safe_globals(
        [_reconstruct, numpy.ndarray, numpy.dtype, numpy.dtypes.UInt32DType]
    ):
        return torch.load(path, map_location="cpu", weights_only=True)


def copy_tokenizer_files(source: Path, target: Path) -> None:
    for name in TOKENIZER_FILES:
        if (source / name).exists():
            shutil.copy2(source / name, target / name)


def write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    os.replace(partial, path)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:  # pragma: no cover
        pass


def rng_state() -> dict:
    import numpy

    legacy_state = numpy.random.get_state(legacy=True)
    # a tuple for the global RandomState (MT19937); numpy types it as possibly a dict (other bit generators)
    assert isinstance(legacy_state, tuple)
    kind, keys, position, has_gauss, cached_gaussian = legacy_state
    # numpy's state as plain values and a tensor, so the checkpoint loads with torch.load(weights_only=True)
    numpy_state = [
        kind,
        torch.from_numpy(keys.astype(numpy.int64)),
        int(position),
        int(has_gauss),
        float(cached_gaussian),
    ]
    state = {"python": random.getstate(), "torch": torch.get_rng_state(), "numpy": numpy_state}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    import numpy

    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    kind, keys, position, has_gauss, cached_gaussian = state["numpy"]
    if isinstance(keys, torch.Tensor):
        keys = keys.numpy().astype(numpy.uint32)
    numpy.random.set_state((kind, keys, int(position), int(has_gauss), float(cached_gaussian)))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
