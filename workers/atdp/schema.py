"""The ATDP v1 JSON Schema, loaded from `docs/atdp/v1.schema.json`: that file is the single source of
field names, types and enums; this module only reads it."""

import copy
import json
from functools import cache
from pathlib import Path

ATDP_VERSION = "1.0"
SCHEMA_PATH = Path(__file__).resolve().parents[2] / "docs" / "atdp" / "v1.schema.json"


@cache
def _schema() -> dict:
    with SCHEMA_PATH.open(encoding="utf-8") as handle:
        return json.load(handle)


def load_schema() -> dict:
    """A private copy of the published schema (callers may change it without touching the cache)."""
    return copy.deepcopy(_schema())


def definition(name: str) -> dict:
    """A copy of one `$defs` entry, for example `definition("Step")`."""
    return copy.deepcopy(_schema()["$defs"][name])


def enum_values(definition_name: str, *field_path: str) -> tuple:
    """The allowed values of an enum field, read from the schema so Django choices and tests never
    restate them: `enum_values("Step", "kind")`, `enum_values("Governance", "review", "status")`,
    `enum_values("DataClass")`."""
    node = _schema()["$defs"][definition_name]
    for field in field_path:
        node = _resolve(node["properties"][field])
    node = _resolve(node)
    if "enum" not in node:
        raise KeyError(f"{definition_name}.{'.'.join(field_path)} is not an enum")
    return tuple(node["enum"])


def _resolve(node: dict) -> dict:
    reference = node.get("$ref")
    if reference is None:
        return node
    prefix = "#/$defs/"
    if not reference.startswith(prefix):
        raise KeyError(f"unsupported reference {reference}")
    return _resolve(_schema()["$defs"][reference[len(prefix) :]])
