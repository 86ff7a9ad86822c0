"""A model of a real model's shape with random weights: its config.json and tokenizer files, weights drawn
from the config's initializer (seeded). For throughput figures where the weights' values do not matter and
the weights themselves cannot travel (the device machine takes 64 MiB; SmolLM2's GGUF alone is 93 MB).

    python3 bench/gpu/shape.py --like var/real-model/smollm2 --out /tmp/smollm2-shape
    python3 bench/gpu/shape.py --like var/real-model/smollm2 --pack .gpu/smollm2   # config + tokenizer only
"""

import argparse
import shutil
from pathlib import Path

SHAPE_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)


def pack(model_dir: Path, out: Path) -> Path:
    """Copy what defines the shape and the tokenizer (no weights)."""
    out.mkdir(parents=True, exist_ok=True)
    for name in SHAPE_FILES:
        if (model_dir / name).exists():
            shutil.copy2(model_dir / name, out / name)
    return out


def build(like: Path, out: Path, seed: int = 0) -> Path:
    """A float32 Hugging Face directory with `like`'s config and tokenizer and seeded random weights."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    config = AutoConfig.from_pretrained(like)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    pack(like, out)
    model.save_pretrained(out, safe_serialization=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--like", type=Path, required=True, help="a model directory (or a packed shape)")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--out", type=Path, help="write the random-weight model here")
    group.add_argument("--pack", type=Path, help="copy only the config and tokenizer files here")
    parser.add_argument("--seed", type=int, default=0)
    arguments = parser.parse_args()
    if arguments.pack:
        print(pack(arguments.like, arguments.pack))
    else:
        print(build(arguments.like, arguments.out, arguments.seed))


if __name__ == "__main__":
    main()
