"""Importing models into the project: GGUF files to servable Hugging Face directories, chat templates the
servers can use, and the manifests that record what a directory holds. No Django here."""

from workers.models.gguf import (
    ConvertedModel,
    GgufInfo,
    convert_gguf,
    ensure_converted,
    inspect_gguf,
    packaged_gguf,
    remove_directory,
)
from workers.models.header import GgufError
from workers.models.manifest import MANIFEST_NAME, manifest_problems, read_manifest
from workers.models.templates import (
    ChatTemplateError,
    check_chat_template,
    read_chat_template,
    validate_chat_template,
    write_with_chat_template,
)

__all__ = [
    "MANIFEST_NAME",
    "ChatTemplateError",
    "ConvertedModel",
    "GgufError",
    "GgufInfo",
    "check_chat_template",
    "convert_gguf",
    "ensure_converted",
    "inspect_gguf",
    "manifest_problems",
    "packaged_gguf",
    "read_chat_template",
    "read_manifest",
    "remove_directory",
    "validate_chat_template",
    "write_with_chat_template",
]
