"""Weight artifacts in the layouts vLLM publishes from: a full Hugging Face checkpoint directory (reloaded
through `reload_weights`) and a PEFT LoRA adapter directory (hot-loaded through `/v1/load_lora_adapter`),
plus the merge that gives the dense weights an adapter stands for (to check served logprobs against)."""

import json
import shutil
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."


def load_state_dict(model_dir: str | Path) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for shard in sorted(Path(model_dir).glob("*.safetensors")):
        tensors.update(load_file(shard))
    return tensors


def write_perturbed_checkpoint(
    source_dir: str | Path, out_dir: str | Path, *, scale: float = 0.02, seed: int = 0
) -> Path:
    """Copy a model directory, adding scale * N(0, 1) noise to every floating-point weight: a stand-in
    for a trained new version with the same architecture, tokenizer and shapes."""
    source, out = Path(source_dir), Path(out_dir)
    shutil.copytree(source, out, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.safetensors"))
    generator = torch.Generator().manual_seed(seed)
    for shard in sorted(source.glob("*.safetensors")):
        tensors = load_file(shard)
        perturbed = {
            name: (
                tensor + scale * torch.randn(tensor.shape, generator=generator, dtype=tensor.dtype)
            ).contiguous()
            if tensor.is_floating_point()
            else tensor
            for name, tensor in sorted(tensors.items())
        }
        save_file(perturbed, out / shard.name, metadata={"format": "pt"})
    return out


def write_lora_adapter(
    base_dir: str | Path,
    out_dir: str | Path,
    *,
    rank: int = 8,
    alpha: int = 16,
    target_modules: tuple[str, ...] = ("q_proj", "v_proj"),
    scale: float = 0.05,
    seed: int = 0,
) -> Path:
    """A PEFT-format LoRA adapter for the model at base_dir with random A and B (PEFT would start B at
    zero; a nonzero B makes the adapter change the outputs)."""
    shapes = _linear_shapes(base_dir, target_modules)
    if not shapes:
        raise ValueError(f"no {target_modules} weights in {base_dir}")
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for module, (out_features, in_features) in sorted(shapes.items()):
        tensors[f"{PEFT_PREFIX}{module}.lora_A.weight"] = scale * torch.randn(
            rank, in_features, generator=generator
        )
        tensors[f"{PEFT_PREFIX}{module}.lora_B.weight"] = scale * torch.randn(
            out_features, rank, generator=generator
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, out / ADAPTER_WEIGHTS, metadata={"format": "pt"})
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": rank,
        "lora_alpha": alpha,
        "target_modules": list(target_modules),
        "lora_dropout": 0.0,
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "base_model_name_or_path": str(base_dir),
    }
    (out / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    return out


def merge_lora(state_dict: dict[str, torch.Tensor], adapter_dir: str | Path) -> dict[str, torch.Tensor]:
    """The dense weights W + (alpha / r) * B @ A that a plain (non-rsLoRA) adapter stands for."""
    adapter = Path(adapter_dir)
    config = json.loads((adapter / ADAPTER_CONFIG).read_text())
    if config.get("use_rslora") or config.get("rank_pattern") or config.get("alpha_pattern"):
        raise ValueError("only plain LoRA adapters (one r and lora_alpha) are merged here")
    scaling = config["lora_alpha"] / config["r"]
    lora = load_file(adapter / ADAPTER_WEIGHTS)
    merged = dict(state_dict)
    for name, lora_a in lora.items():
        if not name.endswith(".lora_A.weight"):
            continue
        module = name.removeprefix(PEFT_PREFIX).removesuffix(".lora_A.weight")
        lora_b = lora[f"{PEFT_PREFIX}{module}.lora_B.weight"]
        weight = merged[f"{module}.weight"]
        merged[f"{module}.weight"] = weight + scaling * (lora_b.to(weight.dtype) @ lora_a.to(weight.dtype))
    return merged


def _linear_shapes(model_dir: str | Path, target_modules: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    shapes = {}
    for shard in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(shard, framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 (safe_open is not iterable)
                module = name.removesuffix(".weight")
                if name.endswith(".weight") and module.rsplit(".", 1)[-1] in target_modules:
                    out_features, in_features = handle.get_slice(name).get_shape()
                    shapes[module] = (out_features, in_features)
    return shapes
