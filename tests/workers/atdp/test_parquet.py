"""ATDP Parquet: bounded batches under a fixed Arrow schema, reading back the same dicts as JSON Lines."""

import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.workers.atdp.fixtures import make_trajectory
from workers.atdp import load_schema, read_jsonl, read_parquet, write_jsonl, write_parquet
from workers.atdp.parquet import ARROW_SCHEMA, OPEN_JSON_STEP_FIELDS


def varied_records() -> list[dict]:
    plain = make_trajectory()
    open_one = make_trajectory(status="open", ended_at=None, task_id=None, group_id=None, session_id="日本-é")
    open_one["steps"][0]["tokens"]["retokenized"] = True
    open_one["steps"][0]["pii"] = {"redacted": True, "entities": ["EMAIL", "PHONE"]}
    tokens = open_one["steps"][3]["tokens"]
    tokens["loss_mask"] = [0] * len(tokens["prompt_ids"]) + [1] * len(tokens["completion_ids"])
    metadata_only = make_trajectory(rewards=[])
    metadata_only["steps"][3]["tokens"] = None
    metadata_only["steps"][0]["tokens"]["completion_ids"][0] = 2**31 - 1
    metadata_only["steps"][0]["state"] = {"deep": {"list": [1, 2.5, None, True, "x"]}}
    return [plain, open_one, metadata_only]


def through_jsonl(records) -> list[dict]:
    buffer = io.BytesIO()
    write_jsonl(records, buffer)
    return [line.record for line in read_jsonl(buffer.getvalue().splitlines())]


def test_round_trip_equals_json_lines(tmp_path):
    records = varied_records()
    path = tmp_path / "export.parquet"
    assert write_parquet(iter(records), path) == 3
    from_parquet = list(read_parquet(path))
    assert from_parquet == through_jsonl(records) == records
    # the same JSON text, not only == (no key lost, no type drift in JSON)
    assert [json.dumps(record, sort_keys=True) for record in from_parquet] == [
        json.dumps(record, sort_keys=True) for record in records
    ]


def test_batches_become_row_groups_in_order():
    records = [make_trajectory(session_id=f"s{position}") for position in range(5)]
    buffer = io.BytesIO()
    assert write_parquet(records, buffer, batch_size=2) == 5
    buffer.seek(0)
    assert pq.ParquetFile(buffer).num_row_groups == 3
    buffer.seek(0)
    assert [record["session_id"] for record in read_parquet(buffer, batch_size=2)] == [
        f"s{position}" for position in range(5)
    ]


def test_very_large_batches_are_written_early(monkeypatch):
    from workers.atdp import parquet

    monkeypatch.setattr(parquet, "_MAX_BATCH_BYTES", 1)
    buffer = io.BytesIO()
    assert write_parquet([make_trajectory() for _ in range(3)], buffer) == 3
    buffer.seek(0)
    assert pq.ParquetFile(buffer).num_row_groups == 3


def test_empty_export_is_a_readable_file(tmp_path):
    path = tmp_path / "empty.parquet"
    assert write_parquet([], path) == 0
    assert list(read_parquet(path)) == []


def test_token_columns_are_typed_lists():
    step = ARROW_SCHEMA.field("steps").type.value_type
    tokens = step.field("tokens").type
    assert tokens.field("prompt_ids").type == pa.list_(pa.int32())
    assert tokens.field("completion_ids").type == pa.list_(pa.int32())
    assert tokens.field("completion_logprobs").type == pa.list_(pa.float32())
    assert tokens.field("completion_versions").type == pa.list_(pa.int32())
    for name in OPEN_JSON_STEP_FIELDS:
        assert step.field(name).type == pa.string()
    assert ARROW_SCHEMA.metadata == {b"atdp_version": b"1.0"}


def test_arrow_schema_has_exactly_the_json_schema_fields():
    """The Arrow layout is written out by hand; this catches drift from docs/atdp/v1.schema.json."""
    definitions = load_schema()["$defs"]

    def names(definition):
        return list(definition["properties"])

    step = ARROW_SCHEMA.field("steps").type.value_type
    assert ARROW_SCHEMA.names == names(definitions["Trajectory"])
    assert [field.name for field in step] == names(definitions["Step"])
    assert [field.name for field in step.field("tokens").type] == names(definitions["Tokens"])
    assert [field.name for field in ARROW_SCHEMA.field("rewards").type.value_type] == names(
        definitions["Reward"]
    )
    assert [field.name for field in ARROW_SCHEMA.field("governance").type] == names(definitions["Governance"])
    assert [field.name for field in ARROW_SCHEMA.field("cost").type] == names(definitions["Cost"])


def test_float64_logprobs_narrow_to_float32():
    record = make_trajectory()
    record["steps"][0]["tokens"]["completion_logprobs"][0] = -0.1
    buffer = io.BytesIO()
    write_parquet([record], buffer)
    buffer.seek(0)
    (back,) = read_parquet(buffer)
    assert back["steps"][0]["tokens"]["completion_logprobs"][0] == float(np.float32(-0.1)) != -0.1


def test_token_ids_beyond_int32_are_refused():
    record = make_trajectory()
    record["steps"][0]["tokens"]["prompt_ids"][0] = 2**31
    with pytest.raises(OverflowError):
        write_parquet([record], io.BytesIO())


def test_refuses_a_parquet_file_that_is_not_atdp(tmp_path):
    path = tmp_path / "other.parquet"
    pq.write_table(pa.table({"a": [1]}), path)
    with pytest.raises(ValueError, match="not an ATDP v1 Parquet file"):
        list(read_parquet(path))
