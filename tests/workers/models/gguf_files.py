"""GGUF files for the tests, written with the `gguf` package's writer: tiny synthetic ones for the refusals,
and the project's default model exported the way llama.cpp's converter lays a Llama out (tensor names,
rotary permutation of the query and key projections, a byte-level BPE vocabulary), for full conversions in
seconds."""

import json
from pathlib import Path

import gguf
import numpy as np
import torch

# tokenizer.ggml.token_type values (llama.cpp's): a normal token, a control (special) one, a user-defined one
NORMAL, CONTROL, USER_DEFINED = 1, 3, 4


def write_tiny(
    path,
    *,
    architecture: str = "llama",
    tensor_type=gguf.GGMLQuantizationType.F32,
    shape=(4, 32),
    metadata: dict | None = None,
) -> Path:
    """A GGUF file with one tensor of `tensor_type` (raw zero bytes of the right size) and a little metadata."""
    path = Path(path)
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name("tiny test model")
    writer.add_context_length(64)
    for key, value in (metadata or {}).items():
        writer.add_string(key, value)
    block_size, block_bytes = gguf.GGML_QUANT_SIZES[tensor_type]
    rows, columns = shape
    raw = np.zeros((rows, columns // block_size * block_bytes), dtype=np.uint8)
    writer.add_tensor("token_embd.weight", raw, raw_shape=raw.shape, raw_dtype=tensor_type)
    _finish(writer)
    return path


def _finish(writer) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _permute_for_rotary(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp stores a Llama's query and key rows interleaved per rotary pair; transformers undoes this
    when it loads a GGUF (LlamaTensorProcessor)."""
    head_dim_half = weight.shape[0] // heads // 2
    return weight.reshape(heads, 2, head_dim_half, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def export_llama(
    model_dir,
    path,
    *,
    chat_template: str | None = None,
    tensor_type=gguf.GGMLQuantizationType.F32,
    name: str = "areal default",
) -> Path:
    """The Llama model in model_dir as a GGUF file at path. `chat_template` replaces the directory's own
    (None keeps it, "" leaves the file without one). F32 keeps the weights exact; F16 and Q8_0 quantize them
    as a real file would."""
    from transformers import AutoConfig, AutoTokenizer
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    model_dir, path = Path(model_dir), Path(path)
    config = AutoConfig.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    from safetensors.torch import load_file

    state = load_file(str(model_dir / "model.safetensors"))
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(name)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_freq_base(float(config.rope_parameters["rope_theta"]))
    writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    writer.add_vocab_size(config.vocab_size)
    _add_tokenizer(writer, model_dir, tokenizer, chat_template)

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, config.num_hidden_layers)
    for hf_name, tensor in state.items():
        if hf_name == "lm_head.weight" and config.tie_word_embeddings:
            continue
        gguf_name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if gguf_name is None:
            raise ValueError(f"no GGUF name for {hf_name}")
        weight = tensor.to(torch.float32).numpy()
        if hf_name.endswith("q_proj.weight"):
            weight = _permute_for_rotary(weight, config.num_attention_heads)
        elif hf_name.endswith("k_proj.weight"):
            weight = _permute_for_rotary(weight, config.num_key_value_heads)
        if weight.ndim == 1 or tensor_type == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(gguf_name, weight)  # norms stay float32, as llama.cpp keeps them
        elif tensor_type == gguf.GGMLQuantizationType.F16 or weight.shape[-1] % _block(tensor_type):
            # rows that do not divide into blocks stay F16, as llama.cpp's converter keeps them
            writer.add_tensor(gguf_name, weight.astype(np.float16))
        else:
            quantized = gguf.quants.quantize(weight, tensor_type)
            writer.add_tensor(gguf_name, quantized, raw_shape=quantized.shape, raw_dtype=tensor_type)
    _finish(writer)
    return path


def _block(tensor_type) -> int:
    return gguf.GGML_QUANT_SIZES[tensor_type][0]


def _add_tokenizer(writer, model_dir: Path, tokenizer, chat_template: str | None) -> None:
    serialized = json.loads((model_dir / "tokenizer.json").read_text())
    vocab = serialized["model"]["vocab"]
    added = {token["content"]: token for token in serialized["added_tokens"]}
    tokens = [None] * (max(vocab.values()) + 1)
    for token, index in vocab.items():
        tokens[index] = token
    for token in added.values():
        tokens[token["id"]] = token["content"]
    types = [
        (CONTROL if added[token]["special"] else USER_DEFINED) if token in added else NORMAL
        for token in tokens
    ]
    merges = [merge if isinstance(merge, str) else " ".join(merge) for merge in serialized["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_eos_token_id(tokenizer.eos_token_id)
    if tokenizer.pad_token_id is not None:
        writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_add_bos_token(False)
    template = tokenizer.chat_template if chat_template is None else chat_template
    if template:
        writer.add_chat_template(template)
