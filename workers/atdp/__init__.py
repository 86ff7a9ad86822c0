"""ATDP v1 (Agent Trajectory Data Protocol): schema, validation, JSON Lines and Parquet export/import,
compact token storage and the training view. Django-free; see docs/atdp/README.md.

The Parquet names load pyarrow (about 35 MB and 0.3 s) on first use only, so the web process, which
only packs tokens and validates, never imports it."""

from workers.atdp.jsonl import ImportLine, read_jsonl, write_jsonl
from workers.atdp.schema import ATDP_VERSION, SCHEMA_PATH, definition, enum_values, load_schema
from workers.atdp.tokens import (
    pack_floats,
    pack_ids,
    pack_versions,
    unpack_floats,
    unpack_ids,
    unpack_versions,
)
from workers.atdp.training_view import (
    training_blockers,
    training_reward,
    training_samples,
    training_view_exclusions,
)
from workers.atdp.validate import Problem, validate_trajectory

__all__ = [
    "ARROW_SCHEMA",
    "ATDP_VERSION",
    "SCHEMA_PATH",
    "ImportLine",
    "Problem",
    "definition",
    "enum_values",
    "load_schema",
    "pack_floats",
    "pack_ids",
    "pack_versions",
    "read_jsonl",
    "read_parquet",
    "training_blockers",
    "training_reward",
    "training_samples",
    "training_view_exclusions",
    "unpack_floats",
    "unpack_ids",
    "unpack_versions",
    "validate_trajectory",
    "write_jsonl",
    "write_parquet",
]

_PARQUET_NAMES = ("ARROW_SCHEMA", "read_parquet", "write_parquet")


def __getattr__(name: str):
    if name in _PARQUET_NAMES:
        from workers.atdp import parquet

        return getattr(parquet, name)
    raise AttributeError(f"module 'workers.atdp' has no attribute {name!r}")
