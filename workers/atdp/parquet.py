"""ATDP Parquet: one row per trajectory under a fixed Arrow schema, written in bounded batches.

Layout: the trajectory's scalar fields are top-level columns; `agent`, `governance` and `cost` are
structs; `steps` and `rewards` are list<struct>. Token arrays are list<int32> (ids, versions),
list<float32> (logprobs) and list<int8> (loss mask), so they stay columnar and compress well. The step
fields whose content is open JSON (`observation`, `state`, `action`, `result`) are stored as JSON text.
Timestamps stay RFC 3339 strings so the original offset and precision survive.

read_parquet gives back the dicts write_parquet was given, with two documented narrowings: logprobs
come back as the nearest float32 (exactly what the database already holds), and `number` fields
(`usd`, reward `value`) come back as floats (1 becomes 1.0, equal under ==).
"""

import json
import os
from array import array
from collections.abc import Iterable, Iterator
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from workers.atdp.schema import ATDP_VERSION

OPEN_JSON_STEP_FIELDS = ("observation", "state", "action", "result")

_COST = pa.struct(
    [
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("latency_ms", pa.int64()),
        ("ttft_ms", pa.int64()),
        ("usd", pa.float64()),
    ]
)
_TOKENS = pa.struct(
    [
        ("tokenizer", pa.string()),
        ("prompt_ids", pa.list_(pa.int32())),
        ("completion_ids", pa.list_(pa.int32())),
        ("completion_logprobs", pa.list_(pa.float32())),
        ("completion_versions", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.int8())),
        ("retokenized", pa.bool_()),  # null: the key was absent (it is optional, default false)
    ]
)
_VERSIONS = pa.struct(
    [
        ("model_version", pa.string()),
        ("policy_version", pa.int64()),
        ("tools", pa.map_(pa.string(), pa.string())),
        ("prompt_version", pa.string()),
        ("gateway", pa.string()),
    ]
)
_STEP = pa.struct(
    [
        ("step_id", pa.string()),
        ("index", pa.int64()),
        ("parent_step_id", pa.string()),
        ("kind", pa.string()),
        ("observation", pa.string()),
        ("state", pa.string()),
        ("action", pa.string()),
        ("result", pa.string()),
        ("tokens", _TOKENS),
        ("versions", _VERSIONS),
        ("cost", _COST),
        ("permissions", pa.struct([("scopes", pa.list_(pa.string())), ("data_class", pa.string())])),
        ("pii", pa.struct([("redacted", pa.bool_()), ("entities", pa.list_(pa.string()))])),
        ("replayable", pa.string()),
        ("created_at", pa.string()),
    ]
)
_REWARD = pa.struct(
    [
        ("reward_id", pa.string()),
        ("target", pa.string()),
        ("step_id", pa.string()),
        ("value", pa.float64()),
        ("kind", pa.string()),
        ("label", pa.string()),
        ("source", pa.string()),
        ("timing", pa.string()),
        ("created_by", pa.string()),
        ("created_at", pa.string()),
        ("idempotency_key", pa.string()),
    ]
)
_GOVERNANCE = pa.struct(
    [
        ("consent", pa.string()),
        ("data_class", pa.string()),
        ("retention_until", pa.string()),
        (
            "review",
            pa.struct(
                [
                    ("status", pa.string()),
                    ("reviewer", pa.string()),
                    ("at", pa.string()),
                    ("note", pa.string()),
                ]
            ),
        ),
        (
            "qualification",
            pa.struct([("status", pa.string()), ("reasons", pa.list_(pa.string())), ("at", pa.string())]),
        ),
        ("training_use", pa.bool_()),
    ]
)

ARROW_SCHEMA = pa.schema(
    [
        ("atdp_version", pa.string()),
        ("trajectory_id", pa.string()),
        ("session_id", pa.string()),
        ("tenant", pa.string()),
        ("agent", pa.struct([("name", pa.string()), ("version", pa.string())])),
        ("task_id", pa.string()),
        ("group_id", pa.string()),
        ("status", pa.string()),
        ("purpose", pa.string()),
        ("started_at", pa.string()),
        ("ended_at", pa.string()),
        ("steps", pa.list_(_STEP)),
        ("rewards", pa.list_(_REWARD)),
        ("governance", _GOVERNANCE),
        ("cost", _COST),
    ],
    metadata={"atdp_version": ATDP_VERSION},
)


# Dictionary encoding pays only for low-cardinality strings; on token ids it makes files larger
# (about 1.5x) and slower to write, so it is limited to these columns.
_DICTIONARY_COLUMNS = [
    "atdp_version",
    "tenant",
    "agent.name",
    "agent.version",
    "status",
    "purpose",
    "steps.list.element.kind",
    "steps.list.element.tokens.tokenizer",
    "steps.list.element.versions.model_version",
    "steps.list.element.versions.prompt_version",
    "steps.list.element.versions.gateway",
    "steps.list.element.permissions.data_class",
    "steps.list.element.replayable",
    "rewards.list.element.target",
    "rewards.list.element.kind",
    "rewards.list.element.source",
    "rewards.list.element.timing",
    "governance.consent",
    "governance.data_class",
    "governance.review.status",
    "governance.qualification.status",
]


def write_parquet(
    records: Iterable[dict],
    out: str | os.PathLike | BinaryIO,
    *,
    batch_size: int = 2048,
    compression: str = "zstd",
) -> int:
    """Writes ATDP records (assumed valid: callers validate) to `out`, a path or binary stream; returns
    how many. Streams: each `batch_size` records become one row group and are then released (sooner
    when a batch of very large records passes about 32 MiB of token and JSON data). Token arrays are
    copied into packed C arrays as each record arrives (4 bytes a token instead of a Python int) and
    handed to Arrow without a per-token Python pass, so memory is bounded by the batch, not by the
    number of records."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    count = 0
    with pq.ParquetWriter(
        out, ARROW_SCHEMA, compression=compression, use_dictionary=_DICTIONARY_COLUMNS
    ) as writer:
        batch = _Batch()
        for record in records:
            batch.add(record)
            if len(batch.rows) == batch_size or batch.estimated_bytes >= _MAX_BATCH_BYTES:
                count += batch.write_to(writer)
                batch = _Batch()
        if batch.rows:
            count += batch.write_to(writer)
    return count


def read_parquet(source: str | os.PathLike | BinaryIO, *, batch_size: int = 1024) -> Iterator[dict]:
    """Streams the records of an ATDP Parquet file, `batch_size` rows in memory at a time."""
    parquet_file = pq.ParquetFile(source)
    metadata = parquet_file.schema_arrow.metadata or {}
    version = metadata.get(b"atdp_version", b"").decode()
    if version.split(".")[0] != ATDP_VERSION.split(".")[0]:
        raise ValueError(f"not an ATDP v1 Parquet file (atdp_version metadata: {version or 'missing'})")
    for batch in parquet_file.iter_batches(batch_size=batch_size):
        for row in batch.to_pylist():
            yield _from_arrow_row(row)


# ---------------------------------------------------------------------------------------------------


_TOKEN_LISTS = (  # (field, array typecode, Arrow type); typecodes checked to be 4 / 4 / 1 bytes below
    ("prompt_ids", "i", pa.int32()),
    ("completion_ids", "i", pa.int32()),
    ("completion_logprobs", "f", pa.float32()),
    ("completion_versions", "i", pa.int32()),
    ("loss_mask", "b", pa.int8()),
)
assert array("i").itemsize == 4
assert array("f").itemsize == 4
assert array("b").itemsize == 1
# A row group is written early once its token arrays and JSON text pass this: it bounds memory for
# huge records (long chat histories) and keeps the int32 list offsets far from overflow.
_MAX_BATCH_BYTES = 32 * 2**20


class _TokenColumns:
    """The `tokens` of one batch's steps, in step order, as packed C arrays plus list offsets."""

    def __init__(self):
        self.present: list[bool] = []
        self.tokenizer: list[str | None] = []
        self.retokenized: list[bool | None] = []
        self.loss_mask_present: list[bool] = []
        self.values = {name: array(typecode) for name, typecode, _ in _TOKEN_LISTS}
        self.offsets = {name: array("i", [0]) for name, _, _ in _TOKEN_LISTS}

    def add(self, tokens: dict | None) -> int:
        """Appends one step's tokens; returns the bytes they take here."""
        self.present.append(tokens is not None)
        self.tokenizer.append(None if tokens is None else tokens["tokenizer"])
        self.retokenized.append(None if tokens is None else tokens.get("retokenized"))
        self.loss_mask_present.append(tokens is not None and tokens["loss_mask"] is not None)
        added = 0
        for name, _, _ in _TOKEN_LISTS:
            values = self.values[name]
            sequence = None if tokens is None else tokens[name]
            if sequence:
                values.extend(sequence)  # OverflowError beyond int32, TypeError on non-numbers
                added += len(sequence) * values.itemsize
            self.offsets[name].append(len(values))
        return added

    def arrow(self) -> pa.StructArray:
        children = [pa.array(self.tokenizer, pa.string())]
        for name, typecode, arrow_type in _TOKEN_LISTS:
            values = pa.array(np.frombuffer(self.values[name], dtype=typecode), arrow_type)
            offsets = pa.array(np.frombuffer(self.offsets[name], dtype=np.int32))
            mask = (
                pa.array([not present for present in self.loss_mask_present]) if name == "loss_mask" else None
            )
            children.append(pa.ListArray.from_arrays(offsets, values, mask=mask))
        children.append(pa.array(self.retokenized, pa.bool_()))
        return pa.StructArray.from_arrays(
            children, fields=list(_TOKENS), mask=pa.array([not present for present in self.present])
        )


class _Batch:
    """Records of one row group: token arrays in _TokenColumns, everything else as light rows (the
    open JSON step fields already serialized)."""

    def __init__(self):
        self.rows: list[dict] = []
        self.tokens = _TokenColumns()
        self.estimated_bytes = 0

    def add(self, record: dict) -> None:
        steps = []
        for step in record["steps"]:
            row = dict(step)
            for name in OPEN_JSON_STEP_FIELDS:
                row[name] = json.dumps(step[name], separators=(",", ":"), ensure_ascii=False, allow_nan=False)
                self.estimated_bytes += len(row[name])
            versions = step["versions"]
            row["versions"] = {**versions, "tools": list(versions["tools"].items())}
            row["tokens"] = None
            self.estimated_bytes += self.tokens.add(step["tokens"])
            steps.append(row)
        self.rows.append({**record, "steps": steps})

    def write_to(self, writer: pq.ParquetWriter) -> int:
        light = pa.RecordBatch.from_pylist(self.rows, schema=ARROW_SCHEMA)
        steps = light.column("steps")
        step_values = steps.values
        children = [
            self.tokens.arrow() if field.name == "tokens" else step_values.field(position)
            for position, field in enumerate(_STEP)
        ]
        steps = pa.ListArray.from_arrays(
            steps.offsets,
            pa.StructArray.from_arrays(children, fields=list(_STEP)),
            mask=steps.is_null() if steps.null_count else None,
        )
        columns = [steps if name == "steps" else light.column(name) for name in ARROW_SCHEMA.names]
        writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA))
        return len(self.rows)


def _from_arrow_row(row: dict) -> dict:
    row["steps"] = [_from_arrow_step(step) for step in row["steps"]]
    return row


def _from_arrow_step(step: dict) -> dict:
    for name in OPEN_JSON_STEP_FIELDS:
        step[name] = json.loads(step[name])
    step["versions"]["tools"] = dict(step["versions"]["tools"])
    tokens = step["tokens"]
    if tokens is not None and tokens["retokenized"] is None:
        del tokens["retokenized"]
    return step
