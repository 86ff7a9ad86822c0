import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.workers.inference.conftest import WEATHER_TOOL
from workers.inference.modelgen import create_default_model, tokenizer_fingerprint

MODEL_FILES = [
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
]


def test_same_seed_gives_byte_identical_files(default_model_dir, tmp_path):
    again = create_default_model(tmp_path / "again", seed=0)
    for name in MODEL_FILES:
        assert (again / name).read_bytes() == (default_model_dir / name).read_bytes(), name


def test_other_seed_changes_weights_not_tokenizer(default_model_dir, tmp_path):
    other = create_default_model(tmp_path / "other", seed=1)
    assert (other / "model.safetensors").read_bytes() != (
        default_model_dir / "model.safetensors"
    ).read_bytes()
    assert tokenizer_fingerprint(other) == tokenizer_fingerprint(default_model_dir)


def test_loads_in_transformers_as_small_float32_llama(default_model_dir):
    model = AutoModelForCausalLM.from_pretrained(default_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    config = json.loads((default_model_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["torch_dtype"] == "float32"
    assert model.dtype == torch.float32
    assert 2_000_000 <= sum(p.numel() for p in model.parameters()) <= 6_000_000
    assert 2000 <= len(tokenizer) <= 4000
    assert model.config.tie_word_embeddings
    generation = json.loads((default_model_dir / "generation_config.json").read_text())
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in generation["eos_token_id"]


@pytest.mark.parametrize(
    "marker", ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
)
def test_markers_are_single_tokens(default_model_dir, marker):
    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    assert len(tokenizer(f"a{marker}b", add_special_tokens=False)["input_ids"]) == 3
    assert tokenizer.convert_ids_to_tokens(tokenizer(marker, add_special_tokens=False)["input_ids"]) == [
        marker
    ]


def test_tool_call_markers_survive_skip_special_tokens(default_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    ids = tokenizer('<tool_call>{"name": "x"}</tool_call><|im_end|>', add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids, skip_special_tokens=True) == '<tool_call>{"name": "x"}</tool_call>'


def test_byte_level_round_trip(default_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    text = 'Ünïcode ☃ and JSON {"a": [1, 2.5]}\n\ttabs'
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text


def test_chat_template_renders_tools_calls_and_results(default_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"celsius": 21}'},
    ]
    text = tokenizer.apply_chat_template(
        messages, tools=[WEATHER_TOOL], add_generation_prompt=True, tokenize=False
    )
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    assert json.dumps(WEATHER_TOOL, sort_keys=True) in text
    # Key order is not part of a tool definition (PostgreSQL's jsonb reorders keys): the prompt is the same.
    reordered = {"function": dict(reversed(list(WEATHER_TOOL["function"].items()))), "type": "function"}
    assert (
        tokenizer.apply_chat_template(messages, tools=[reordered], add_generation_prompt=True, tokenize=False)
        == text
    )
    assert (
        '<|im_start|>assistant\n<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
        "<|im_end|>\n" in text
    )
    assert '<|im_start|>user\n<tool_response>\n{"celsius": 21}\n</tool_response><|im_end|>\n' in text
    assert text.endswith("<|im_start|>assistant\n")
    plain = tokenizer.apply_chat_template(messages[1:2], add_generation_prompt=False, tokenize=False)
    assert plain == "<|im_start|>user\nWeather in Paris?<|im_end|>\n"


def test_chat_template_is_stored_in_tokenizer_config(default_model_dir):
    config = json.loads((default_model_dir / "tokenizer_config.json").read_text())
    assert "<tool_call>" in config["chat_template"]
    assert not (default_model_dir / "chat_template.jinja").exists()


def test_fingerprint_is_stable_across_save_and_load(default_model_dir, tmp_path):
    AutoTokenizer.from_pretrained(default_model_dir).save_pretrained(tmp_path / "resaved")
    assert tokenizer_fingerprint(tmp_path / "resaved") == tokenizer_fingerprint(default_model_dir)


def test_fingerprint_differs_for_a_different_tokenizer(default_model_dir, mismatched_tokenizer_model_dir):
    assert tokenizer_fingerprint(mismatched_tokenizer_model_dir) != tokenizer_fingerprint(default_model_dir)
