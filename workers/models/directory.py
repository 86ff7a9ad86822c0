"""A Hugging Face model directory brought in as it is (no conversion): what it must hold to be served and
trained here, and its copy into the registry's storage. No Django here: apps/training/registration.py
decides where a directory may come from and registers the copy.

Served and trained here means: `config.json` (a JSON object), weights as safetensors (pickled `.bin` weights
are refused: loading them can run code), a fast tokenizer (`tokenizer.json`) and a chat template (in
`tokenizer_config.json` or `chat_template.jinja`). Only the directory's own regular files count and are
copied; a link is refused (it could point anywhere on the machine), subdirectories are left out.
"""

import json
import os
import shutil
import tempfile
from pathlib import Path

from workers.models.manifest import MANIFEST_NAME, write_manifest
from workers.models.templates import read_chat_template

WEIGHTS_SUFFIX = ".safetensors"
PICKLED_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


def model_directory_problems(model_dir, *, max_weight_bytes: int) -> list[str]:
    """Why `model_dir` cannot be registered as it is, one sentence each; [] when it can."""
    model_dir = Path(model_dir)
    if model_dir.is_symlink() or not model_dir.is_dir():
        return ["is not a directory"]
    entries = sorted(model_dir.iterdir())
    links = [entry.name for entry in entries if entry.is_symlink()]
    if links:
        return [f"holds links ({', '.join(links[:5])}); copy the files themselves in"]
    files = {entry.name: entry for entry in entries if entry.is_file()}
    problems = []
    try:
        config = json.loads(files["config.json"].read_text()) if "config.json" in files else None
    except (OSError, ValueError):
        config = None
    if not isinstance(config, dict):
        problems.append("has no readable config.json")
    weights = [entry for name, entry in files.items() if name.endswith(WEIGHTS_SUFFIX)]
    if not weights:
        pickled = [name for name in files if name.endswith(PICKLED_WEIGHTS)]
        problems.append(
            "has no safetensors weights"
            + (f" ({', '.join(pickled[:3])} are pickled weights, which are refused)" if pickled else "")
        )
    elif sum(entry.stat().st_size for entry in weights) > max_weight_bytes:
        problems.append(f"holds more than {max_weight_bytes:,} bytes of weights")
    if "tokenizer.json" not in files:
        problems.append("has no tokenizer.json (a fast tokenizer)")
    if read_chat_template(model_dir) is None:
        problems.append(
            "has no chat template (tokenizer_config.json's chat_template, or chat_template.jinja)"
        )
    return problems


def copy_model_directory(source_dir, out_dir, *, source: dict) -> dict:
    """Copies `source_dir`'s regular files (not its manifest) to `out_dir` and writes a manifest there naming
    `source` and every file's sha256; returns the manifest. Written under a temporary name beside out_dir and
    renamed at the end, so a failure leaves nothing. Refuses an existing out_dir (FileExistsError)."""
    source_dir, out_dir = Path(source_dir), Path(out_dir)
    if out_dir.exists():
        raise FileExistsError(f"{out_dir} exists already")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    staging.chmod(0o755)  # mkdtemp's 0700 would keep a server running as another user out
    try:
        for entry in sorted(source_dir.iterdir()):
            if entry.is_symlink() or not entry.is_file() or entry.name == MANIFEST_NAME:
                continue
            shutil.copyfile(entry, staging / entry.name)  # a copy: later changes at the source change nothing
        manifest = write_manifest(staging, source=source)
        os.rename(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return manifest
