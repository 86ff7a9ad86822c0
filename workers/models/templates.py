"""Chat templates for the project's servers: checking one by rendering a probe conversation, choosing one for
an imported model, and writing a model directory that serves another template over the same weights.

The servers (the embedded one, vLLM with `--tool-call-parser hermes`) read the template from the model
directory's tokenizer_config.json when they start and parse tool calls written as
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (workers/inference/chat.py). A template is usable
here when, over the probe conversation, it renders without error, ends with an assistant generation prompt,
and renders the tool definitions, the assistant's tool call and the tool's result."""

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from workers.inference.chat import render_chat_prompt
from workers.inference.chat_template import CHAT_TEMPLATE
from workers.models.manifest import MANIFEST_NAME, write_manifest

MAX_TEMPLATE_CHARS = 100_000
CHATML_TOKENS = ("<|im_start|>", "<|im_end|>")
TOKENIZER_CONFIG = "tokenizer_config.json"
TEMPLATE_FILE = "chat_template.jinja"

PROBE_TOOL_NAME = "areal_probe_lookup"
PROBE_ARGUMENT = "probe-argument-5120"
PROBE_RESULT = "probe-result-7431"
PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": PROBE_TOOL_NAME,
        "description": "Looks a probe up.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    },
}
PROBE_MESSAGES = (
    {"role": "system", "content": "You answer probes."},
    {"role": "user", "content": "Look the probe up."},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_probe",
                "type": "function",
                "function": {"name": PROBE_TOOL_NAME, "arguments": json.dumps({"query": PROBE_ARGUMENT})},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_probe", "content": PROBE_RESULT},
)


class ChatTemplateError(ValueError):
    """A chat template the servers cannot use; the message says what is wrong."""


@dataclass(frozen=True)
class TemplateCheck:
    """What a template did with the probe conversation. `error` is set when it did not render at all."""

    error: str = ""
    generation_prompt: bool = False
    tools: bool = False
    tool_call: bool = False
    tool_result: bool = False

    @property
    def problems(self) -> list[str]:
        if self.error:
            return [f"it does not render: {self.error}"]
        missing = [
            ("generation_prompt", "renders no assistant generation prompt"),
            ("tools", "does not render the tool definitions"),
            ("tool_call", "does not render the assistant's tool call"),
            ("tool_result", "does not render the tool's result"),
        ]
        return [message for field, message in missing if not getattr(self, field)]


def check_chat_template(tokenizer, template: str | None = None) -> TemplateCheck:
    """Renders the probe conversation with `template` (default: the tokenizer's own) the way the servers do."""
    messages = list(PROBE_MESSAGES)
    try:
        with_prompt = render_chat_prompt(
            tokenizer, messages, tools=[PROBE_TOOL], add_generation_prompt=True, chat_template=template
        )
        without_prompt = render_chat_prompt(
            tokenizer, messages, tools=[PROBE_TOOL], add_generation_prompt=False, chat_template=template
        )
        tools_only = render_chat_prompt(
            tokenizer, messages[:2], tools=[PROBE_TOOL], add_generation_prompt=True, chat_template=template
        )
    except Exception as error:  # noqa: BLE001  (jinja syntax and runtime errors, raise_exception(), type errors)
        return TemplateCheck(error=f"{type(error).__name__}: {error}"[:500])
    if not all(isinstance(text, str) for text in (with_prompt, without_prompt, tools_only)):
        return TemplateCheck(error="it rendered something other than text")
    return TemplateCheck(
        generation_prompt=len(with_prompt) > len(without_prompt) and with_prompt.startswith(without_prompt),
        tools=PROBE_TOOL_NAME in tools_only,
        tool_call=PROBE_ARGUMENT in without_prompt,
        tool_result=PROBE_RESULT in without_prompt,
    )


def validate_chat_template(tokenizer, template: str) -> None:
    """Raises ChatTemplateError unless `template` renders the probe conversation completely."""
    if not isinstance(template, str) or not template.strip():
        raise ChatTemplateError("the chat template is empty")
    if len(template) > MAX_TEMPLATE_CHARS:
        raise ChatTemplateError(
            f"the chat template has {len(template)} characters; at most {MAX_TEMPLATE_CHARS} are accepted"
        )
    problems = check_chat_template(tokenizer, template).problems
    if problems:
        raise ChatTemplateError("the chat template is refused: " + "; ".join(problems))


def has_chatml_tokens(tokenizer) -> bool:
    """Whether `<|im_start|>` and `<|im_end|>` are single special tokens of this tokenizer (the project's
    template is ChatML and needs them whole)."""
    special = set(getattr(tokenizer, "all_special_tokens", []))
    added = {str(token) for token in getattr(tokenizer, "added_tokens_decoder", {}).values()}
    for token in CHATML_TOKENS:
        ids = tokenizer.encode(token, add_special_tokens=False)
        if len(ids) != 1 or token not in special | added:
            return False
    return True


def choose_chat_template(tokenizer, requested: str | None = None) -> tuple[str, str]:
    """(template, origin) for a model being imported: `requested` when given (validated, origin "file");
    else the model's own when it renders the probe completely ("model"); else the project's ChatML template
    with tools ("project") when the tokenizer has the ChatML tokens. ChatTemplateError otherwise."""
    if requested is not None:
        validate_chat_template(tokenizer, requested)
        return requested, "file"
    own = getattr(tokenizer, "chat_template", None)
    own_problems = check_chat_template(tokenizer).problems if own else ["the model has no chat template"]
    if isinstance(own, str) and not own_problems:
        return own, "model"
    if not has_chatml_tokens(tokenizer):
        raise ChatTemplateError(
            f"the model's chat template cannot serve tool calls ({'; '.join(own_problems)}) and its "
            "tokenizer lacks the ChatML tokens <|im_start|>/<|im_end|> the project's template needs; "
            "pass a chat template that renders tools"
        )
    validate_chat_template(tokenizer, CHAT_TEMPLATE)
    return CHAT_TEMPLATE, "project"


def read_chat_template(model_dir) -> str | None:
    """The chat template stored in a model directory (tokenizer_config.json, else chat_template.jinja)."""
    model_dir = Path(model_dir)
    try:
        config = json.loads((model_dir / TOKENIZER_CONFIG).read_text())
    except (OSError, ValueError):
        config = {}
    template = config.get("chat_template") if isinstance(config, dict) else None
    if isinstance(template, str) and template:
        return template
    try:
        return (model_dir / TEMPLATE_FILE).read_text() or None
    except OSError:
        return None


def write_portable_tokenizer_config(model_dir, chat_template: str) -> None:
    """Stores `chat_template` in tokenizer_config.json, where readers built on older transformers (vLLM pins
    one) look, with a tokenizer class transformers 4 and 5 both know, and removes chat_template.jinja so
    that the template lives in one place."""
    config_path = Path(model_dir) / TOKENIZER_CONFIG
    config = json.loads(config_path.read_text())
    config["chat_template"] = chat_template
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    (Path(model_dir) / TEMPLATE_FILE).unlink(missing_ok=True)


def write_with_chat_template(source_dir, out_dir, chat_template: str, *, source: dict | None = None) -> Path:
    """A new model directory at out_dir: source_dir's files, the weights hard-linked (copied where links are
    impossible), tokenizer_config.json carrying `chat_template`, and a manifest. The template must have been
    validated (validate_chat_template). Written under a temporary name beside out_dir and renamed: on any
    error nothing is left. Refuses an existing out_dir."""
    source_dir, out_dir = Path(source_dir), Path(out_dir)
    if not (source_dir / TOKENIZER_CONFIG).is_file():
        raise ChatTemplateError(f"{source_dir} has no {TOKENIZER_CONFIG}")
    if out_dir.exists():
        raise ChatTemplateError(f"{out_dir} exists already")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    staging.chmod(0o755)  # mkdtemp's 0700 would keep a server running as another user out
    try:
        for entry in sorted(source_dir.iterdir()):
            if not entry.is_file() or entry.name in (MANIFEST_NAME, TEMPLATE_FILE):
                continue
            target = staging / entry.name
            if entry.name == TOKENIZER_CONFIG:
                shutil.copyfile(entry, target)
                continue
            try:
                os.link(entry, target)
            except OSError:
                shutil.copyfile(entry, target)
        write_portable_tokenizer_config(staging, chat_template)
        write_manifest(
            staging, source={"kind": "chat_template", "parent_dir": str(source_dir), **(source or {})}
        )
        staging.rename(out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out_dir
