"""Create the project's default model offline: a small Llama-architecture causal LM with a locally trained
byte-level BPE tokenizer and a Qwen-style ChatML chat template, saved as a standard Hugging Face directory.

    python -m workers.inference.modelgen --out var/models/default --seed 0
"""

import argparse
import hashlib
import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from workers.inference.chat_template import CHAT_TEMPLATE
from workers.inference.corpus import generate_corpus

END_OF_TEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
# Tool-call markers are never split but are not "special": like Qwen's, they must survive
# skip_special_tokens decoding so that tool parsers (ours and vLLM's hermes parser) can see them.
SPECIAL_TOKENS = [END_OF_TEXT, IM_START, IM_END]
MARKER_TOKENS = [TOOL_CALL_START, TOOL_CALL_END]
VOCAB_SIZE = 3072
# Room for the agent frameworks' own default prompts (smolagents' system prompt alone is ~2,000 tokens):
# rotary positions cost no parameters, so a longer context changes neither the size nor the creation time.
MAX_POSITION_EMBEDDINGS = 4096


def create_default_model(out_dir, *, seed: int = 0) -> Path:
    """Write the default model into out_dir and return its path; the same seed gives byte-identical files."""
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=train_tokenizer(),
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        model_max_length=MAX_POSITION_EMBEDDINGS,
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.save_pretrained(out)
    _write_portable_tokenizer_config(out)

    end_ids = tokenizer.convert_tokens_to_ids([IM_END, END_OF_TEXT])
    assert isinstance(end_ids, list)  # a list of tokens gives a list of ids (transformers types either)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=MAX_POSITION_EMBEDDINGS,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=end_ids[0],
        pad_token_id=end_ids[1],
    )
    torch.manual_seed(seed)
    # transformers wraps PreTrainedModel.to with functools.wraps, whose type forgets that it binds self
    model = LlamaForCausalLM(config).to(torch.float32).eval()  # type: ignore[arg-type]
    model.generation_config = GenerationConfig(eos_token_id=end_ids, pad_token_id=end_ids[1])
    model.save_pretrained(out)
    _declare_float32(out / "config.json")
    return out


PREVIOUS_MAX_POSITION_EMBEDDINGS = 1024  # what the default model had before


def widen_context(model_dir) -> bool:
    """Raises the context of a default model made before MAX_POSITION_EMBEDDINGS grew (same weights: rotary
    positions have no parameters) to the current one, in its config and tokenizer config. Any other model is
    left alone. True when it changed the files."""
    model_dir = Path(model_dir)
    config_path, tokenizer_path = model_dir / "config.json", model_dir / "tokenizer_config.json"
    try:
        config = json.loads(config_path.read_text())
        tokenizer_config = json.loads(tokenizer_path.read_text())
    except (OSError, ValueError):
        return False
    made_here = (
        config.get("architectures") == ["LlamaForCausalLM"]
        and config.get("hidden_size") == 256
        and config.get("num_hidden_layers") == 4
        and config.get("max_position_embeddings") == PREVIOUS_MAX_POSITION_EMBEDDINGS
        and tokenizer_config.get("model_max_length") == PREVIOUS_MAX_POSITION_EMBEDDINGS
    )
    if not made_here:
        return False
    config["max_position_embeddings"] = MAX_POSITION_EMBEDDINGS
    tokenizer_config["model_max_length"] = MAX_POSITION_EMBEDDINGS
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    tokenizer_path.write_text(
        json.dumps(tokenizer_config, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    )
    return True


def train_tokenizer() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS + MARKER_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(generate_corpus(), trainer=trainer)
    serialized = json.loads(tokenizer.to_str())
    for added in serialized["added_tokens"]:
        added["special"] = added["content"] in SPECIAL_TOKENS
    return Tokenizer.from_str(json.dumps(serialized))


def _write_portable_tokenizer_config(model_dir: Path) -> None:
    # Newer transformers writes chat_template.jinja beside the config; older readers (vLLM pins an
    # earlier transformers) look in tokenizer_config.json, so keep it there, in one place.
    config_path = model_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = CHAT_TEMPLATE
    config["tokenizer_class"] = "PreTrainedTokenizerFast"  # understood by transformers 4 and 5 alike
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    (model_dir / "chat_template.jinja").unlink(missing_ok=True)


def _declare_float32(config_path: Path) -> None:
    # transformers 5 writes "dtype"; readers built on transformers 4 (and vLLM's docs) use "torch_dtype".
    config = json.loads(config_path.read_text())
    config["dtype"] = config["torch_dtype"] = "float32"
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def tokenizer_fingerprint(model_dir) -> str:
    """sha256 over vocabulary, merges and added tokens; equal for tokenizers that encode identically."""
    tokenizer_file = Path(model_dir) / "tokenizer.json"
    if tokenizer_file.exists():
        serialized = json.loads(Tokenizer.from_file(str(tokenizer_file)).to_str())
    else:
        from transformers import AutoTokenizer

        serialized = json.loads(AutoTokenizer.from_pretrained(model_dir).backend_tokenizer.to_str())
    model = serialized.get("model", {})
    merges = [
        merge.split(" ", 1) if isinstance(merge, str) else list(merge) for merge in model.get("merges", [])
    ]
    identity = {
        "type": model.get("type"),
        "vocab": sorted(model.get("vocab", {}).items(), key=lambda item: item[1])
        if isinstance(model.get("vocab"), dict)
        else model.get("vocab"),
        "merges": merges,
        "added_tokens": sorted(
            (token["id"], token["content"], bool(token.get("special")))
            for token in serialized.get("added_tokens", [])
        ),
    }
    return hashlib.sha256(json.dumps(identity, ensure_ascii=False).encode()).hexdigest()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description="Create the default small causal LM as a HF model directory."
    )
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--seed", type=int, default=0)
    arguments = parser.parse_args(argv)
    path = create_default_model(arguments.out, seed=arguments.seed)
    print(f"{path} tokenizer={tokenizer_fingerprint(path)[:16]}")


if __name__ == "__main__":
    main()
