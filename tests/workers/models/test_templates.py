"""Chat templates: the probe conversation tells a template the servers can use from one they cannot, and a
template version shares its parent's weights on disk."""

import json
import os

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from tests.workers.models.conftest import TOOLLESS_TEMPLATE
from workers.inference.chat_template import CHAT_TEMPLATE
from workers.models import (
    ChatTemplateError,
    check_chat_template,
    manifest_problems,
    read_chat_template,
    read_manifest,
    validate_chat_template,
    write_with_chat_template,
)
from workers.models.templates import (
    MAX_TEMPLATE_CHARS,
    PROBE_RESULT,
    PROBE_TOOL_NAME,
    choose_chat_template,
    has_chatml_tokens,
)


@pytest.fixture(scope="module")
def tokenizer(default_model_dir):
    return AutoTokenizer.from_pretrained(default_model_dir)


def test_the_projects_template_renders_the_whole_probe(tokenizer):
    check = check_chat_template(tokenizer, CHAT_TEMPLATE)
    assert check.problems == []
    assert (check.generation_prompt, check.tools, check.tool_call, check.tool_result) == (True,) * 4
    validate_chat_template(tokenizer, CHAT_TEMPLATE)


def test_a_smollm2_style_template_renders_turns_but_not_tools(tokenizer):
    check = check_chat_template(tokenizer, TOOLLESS_TEMPLATE)
    assert check.error == ""
    assert check.generation_prompt
    assert check.tool_result  # the tool turn's content is rendered as a plain turn
    assert not check.tools
    assert not check.tool_call
    assert check.problems == [
        "does not render the tool definitions",
        "does not render the assistant's tool call",
    ]


def test_the_probe_renders_through_the_servers_path(tokenizer):
    """The probe goes through workers.inference.chat.render_chat_prompt, as a request would."""
    from workers.inference.chat import render_chat_prompt
    from workers.models.templates import PROBE_MESSAGES, PROBE_TOOL

    text = render_chat_prompt(tokenizer, list(PROBE_MESSAGES), tools=[PROBE_TOOL])
    assert PROBE_TOOL_NAME in text
    assert f"<tool_response>\n{PROBE_RESULT}\n</tool_response>" in text
    assert '<tool_call>{"name": "areal_probe_lookup", "arguments": {"query": "probe-argument-5120"}}' in text
    assert text.endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("", "the chat template is empty"),
        ("   \n", "the chat template is empty"),
        ("x" * (MAX_TEMPLATE_CHARS + 1), f"at most {MAX_TEMPLATE_CHARS} are accepted"),
        ("{% if %}", "does not render: TemplateSyntaxError"),
        ("{{ messages[99].content }}", "does not render"),
        ("{{ 1 / 0 }}", "does not render: ZeroDivisionError"),
    ],
    ids=["empty", "blank", "too-long", "syntax", "undefined", "runtime"],
)
def test_refusals_say_why(tokenizer, template, message):
    with pytest.raises(ChatTemplateError, match="the chat template") as refused:
        validate_chat_template(tokenizer, template)
    assert message in str(refused.value)


def test_templates_are_sandboxed(tokenizer):
    """Templates are tenant input: transformers renders them in jinja's immutable sandbox."""
    escape = "{{ ''.__class__.__mro__[1].__subclasses__() }}"
    assert "does not render: SecurityError" in check_chat_template(tokenizer, escape).problems[0]


def test_choosing_keeps_a_template_with_tools_and_replaces_one_without(tokenizer):
    assert choose_chat_template(tokenizer) == (tokenizer.chat_template, "model")
    assert has_chatml_tokens(tokenizer)
    toolless = AutoTokenizer.from_pretrained(tokenizer.name_or_path)
    toolless.chat_template = TOOLLESS_TEMPLATE
    assert choose_chat_template(toolless) == (CHAT_TEMPLATE, "project")
    toolless.chat_template = None
    assert choose_chat_template(toolless) == (CHAT_TEMPLATE, "project")


def test_a_tokenizer_without_chatml_tokens_needs_a_given_template():
    backend = Tokenizer(models.WordLevel({"[UNK]": 0, "hello": 1}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    plain = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")
    plain.chat_template = TOOLLESS_TEMPLATE
    assert not has_chatml_tokens(plain)
    with pytest.raises(ChatTemplateError, match="lacks the ChatML tokens <|im_start|>/<|im_end|>"):
        choose_chat_template(plain)


def test_a_template_version_hard_links_the_weights_and_carries_its_template(converted_dir, tmp_path):
    template = CHAT_TEMPLATE.replace("You are a helpful assistant.", "You are terse.")
    out = write_with_chat_template(converted_dir, tmp_path / "v1", template, source={"parent_version": 0})
    weights, parent_weights = out / "model.safetensors", converted_dir / "model.safetensors"
    assert os.stat(weights).st_ino == os.stat(parent_weights).st_ino  # shared, not copied
    assert read_chat_template(out) == template
    assert read_chat_template(converted_dir) != template  # the parent is untouched
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    manifest = read_manifest(out)
    assert manifest["source"] == {
        "kind": "chat_template",
        "parent_dir": str(converted_dir),
        "parent_version": 0,
    }
    assert (
        manifest["files"]["model.safetensors"] == read_manifest(converted_dir)["files"]["model.safetensors"]
    )
    assert (
        manifest["files"]["tokenizer_config.json"]
        != read_manifest(converted_dir)["files"]["tokenizer_config.json"]
    )
    assert manifest_problems(out) == []
    reloaded = AutoTokenizer.from_pretrained(out)
    assert reloaded.chat_template == template


def test_a_template_version_refuses_an_existing_directory_and_a_non_model(converted_dir, tmp_path):
    (tmp_path / "taken").mkdir()
    with pytest.raises(ChatTemplateError, match="exists already"):
        write_with_chat_template(converted_dir, tmp_path / "taken", CHAT_TEMPLATE)
    with pytest.raises(ChatTemplateError, match="has no tokenizer_config.json"):
        write_with_chat_template(tmp_path / "taken", tmp_path / "new", CHAT_TEMPLATE)
    assert sorted(entry.name for entry in tmp_path.iterdir()) == ["taken"]
