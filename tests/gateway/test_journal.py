"""The journal: when the database refuses a record, the others are stored, the refused one is set aside with
its error (rejected.jsonl: metadata only, 0600, bounded) and nothing blocks the steps that follow; records
are written whole (short and failed writes), the committed marker is replaced atomically, and recovery goes
line by line (a torn marker, corrupt or torn lines)."""

import asyncio
import errno
import json
import os
import stat
import uuid

import pytest

from apps.gateway.journal import Journal, JournalUnavailable, journal_recover
from apps.trajectories.models import Step

pytestmark = pytest.mark.django_db(transaction=True)


def _record(tenant_id: int, session: str, tokens: int = 1) -> dict:
    return {
        "step_id": str(uuid.uuid4()),
        "tenant_id": tenant_id,
        "session_id": session,
        "endpoint": "chat",
        "prompt_tokens": tokens,
        "completion_tokens": 1,
    }


def test_a_refused_record_is_set_aside_and_the_rest_land(tenant, tmp_path):
    journal = Journal(tmp_path)
    good = [_record(tenant.pk, "s1"), _record(tenant.pk, "s2")]
    refused = _record(tenant.pk, "s9", tokens=-1)  # a negative count: the database's check refuses it
    for record in (good[0], refused, good[1]):
        journal.append(record)
    asyncio.run(journal.flush())
    journal.append(later := _record(tenant.pk, "s3"))
    asyncio.run(journal.flush())
    journal.close()

    stored = set(map(str, Step.objects.values_list("id", flat=True)))
    assert stored == {good[0]["step_id"], good[1]["step_id"], later["step_id"]}
    rejected = [json.loads(line) for line in (tmp_path / "rejected.jsonl").read_text().splitlines()]
    assert [entry["record"]["step_id"] for entry in rejected] == [refused["step_id"]]
    assert rejected[0]["error"]
    assert journal_recover(tmp_path) == 0  # everything was committed: nothing to replay


def test_replay_sets_a_refused_record_aside(tenant, tmp_path):
    lines = [_record(tenant.pk, "r1"), _record(tenant.pk, "r9", tokens=-1), _record(tenant.pk, "r2")]
    (tmp_path / "journal-1-dead.jsonl").write_text("".join(json.dumps(record) + "\n" for record in lines))
    assert journal_recover(tmp_path) == 2
    assert Step.objects.count() == 2
    assert len((tmp_path / "rejected.jsonl").read_text().splitlines()) == 1


# Writing and recovery: whole records, an atomic committed marker, recovery line by line, bounded rejects.


def _full(tenant_id: int, session: str) -> dict:
    """A record with content, as the gateway journals it."""
    return {
        **_record(tenant_id, session),
        "observation": {"messages": [{"role": "user", "content": "secret prompt"}]},
        "action": {"text": "secret answer"},
    }


def _write_limited(journal: Journal, limit: int):
    """os.write that writes at most `limit` bytes per call to the journal's file (a short write)."""
    real = os.write

    def write(fd, data):
        return real(fd, bytes(data[:limit]) if fd == journal.fd else data)

    return write


def test_short_writes_still_write_whole_records(tenant, tmp_path, monkeypatch):
    journal = Journal(tmp_path)
    records = [_record(tenant.pk, f"short-{index}") for index in range(3)]
    monkeypatch.setattr(os, "write", _write_limited(journal, 7))
    for record in records:
        journal.append(record)
    monkeypatch.undo()
    lines = journal.path.read_bytes().splitlines(keepends=True)
    assert [json.loads(line)["step_id"] for line in lines] == [record["step_id"] for record in records]
    assert journal.offset == journal.path.stat().st_size
    journal.close()  # the process dies before any flush: recovery brings every record back
    assert journal_recover(tmp_path) == 3
    assert Step.objects.count() == 3


def test_a_write_that_fails_halfway_leaves_no_torn_record(tenant, tmp_path, monkeypatch):
    journal = Journal(tmp_path)
    journal.append(before := _record(tenant.pk, "before"))
    real, calls = os.write, []

    def write(fd, data):
        if fd != journal.fd:
            return real(fd, data)
        calls.append(len(data))
        if len(calls) == 1:
            return real(fd, bytes(data[:10]))  # some bytes land, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(JournalUnavailable) as raised:
        journal.append(_record(tenant.pk, "lost"))
    assert raised.value.retry_after > 0
    monkeypatch.undo()
    assert journal.path.stat().st_size == journal.offset  # the partial bytes were taken back
    journal.append(after := _record(tenant.pk, "after"))
    assert [record["step_id"] for record, _ in journal.pending] == [before["step_id"], after["step_id"]]
    journal.close()
    assert journal_recover(tmp_path) == 2
    assert set(map(str, Step.objects.values_list("id", flat=True))) == {before["step_id"], after["step_id"]}
    assert not (tmp_path / "rejected.jsonl").exists()


def test_a_fragment_that_cannot_be_cut_off_becomes_a_line_of_its_own(tenant, tmp_path, monkeypatch):
    journal = Journal(tmp_path)
    journal.append(before := _record(tenant.pk, "before"))
    real_write, real_truncate, failures = os.write, os.ftruncate, []

    def write(fd, data):
        if fd == journal.fd and not failures:
            failures.append(real_write(fd, bytes(data[:10])))
            raise OSError(errno.EIO, "Input/output error")
        return real_write(fd, data)

    def truncate(fd, length):
        if fd == journal.fd:
            raise OSError(errno.EIO, "Input/output error")  # the fragment cannot be cut off
        return real_truncate(fd, length)

    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "ftruncate", truncate)
    with pytest.raises(JournalUnavailable):
        journal.append(_record(tenant.pk, "lost"))
    journal.append(after := _record(tenant.pk, "after"))  # the fragment is still there: it is closed off
    monkeypatch.undo()
    assert journal.offset == journal.path.stat().st_size
    journal.close()
    assert journal_recover(tmp_path) == 2
    assert set(map(str, Step.objects.values_list("id", flat=True))) == {before["step_id"], after["step_id"]}
    assert [json.loads(line)["bytes"] for line in (tmp_path / "rejected.jsonl").read_text().splitlines()] == [
        11
    ]


def _dead_journal(directory, lines: list[bytes], marker: bytes | None = None):
    path = directory / "journal-1-dead.jsonl"
    path.write_bytes(b"".join(lines))
    if marker is not None:
        path.with_suffix(".committed").write_bytes(marker)
    return path


@pytest.mark.parametrize("marker", [b"", b"\x00\x00\x00", b"12", b"-5", b"99999999"])
def test_a_torn_committed_marker_replays_the_whole_file(tenant, tmp_path, marker):
    records = [_record(tenant.pk, f"m{index}") for index in range(3)]
    path = _dead_journal(tmp_path, [json.dumps(record).encode() + b"\n" for record in records], marker)
    assert journal_recover(tmp_path) == 3  # replays are idempotent: starting over loses nothing
    assert Step.objects.count() == 3
    assert not path.exists()
    assert not path.with_suffix(".committed").exists()
    assert not list(tmp_path.glob("*.failed"))


def test_a_valid_marker_skips_what_was_committed(tenant, tmp_path):
    lines = [json.dumps(_record(tenant.pk, f"v{index}")).encode() + b"\n" for index in range(3)]
    _dead_journal(tmp_path, lines, str(len(lines[0])).encode())
    assert journal_recover(tmp_path) == 2


def test_corrupt_lines_are_quarantined_one_by_one(tenant, tmp_path):
    good = [_full(tenant.pk, f"c{index}") for index in range(4)]
    glued = json.dumps(_full(tenant.pk, "glued")).encode()[:40] + json.dumps(good[2]).encode()[:30] + b"\n"
    lines = [
        json.dumps(good[0]).encode() + b"\n",
        b"\x00\xffnot json at all\n",
        json.dumps(good[1]).encode() + b"\n",
        glued,
        b"[1, 2, 3]\n",
        json.dumps(good[2]).encode() + b"\n",
        json.dumps(good[3]).encode() + b"\n",
        b'{"step_id": "torn-last-wri',
    ]
    path = _dead_journal(tmp_path, lines)
    assert journal_recover(tmp_path) == 4
    assert set(map(str, Step.objects.values_list("id", flat=True))) == {record["step_id"] for record in good}
    assert not path.exists()
    assert not list(tmp_path.glob("*.failed"))
    rejected_file = tmp_path / "rejected.jsonl"
    assert stat.S_IMODE(rejected_file.stat().st_mode) == 0o600
    rejected = [json.loads(line) for line in rejected_file.read_text().splitlines()]
    assert len(rejected) == 4  # three corrupt lines and the torn tail, each on its own
    assert all(entry["journal"] == path.name and entry["error"] and entry["bytes"] > 0 for entry in rejected)
    assert "secret" not in rejected_file.read_text()


def test_the_committed_marker_is_replaced_atomically(tenant, tmp_path, monkeypatch):
    journal = Journal(tmp_path)
    journal.append(_record(tenant.pk, "a1"))
    asyncio.run(journal.flush())
    marker = journal.path.with_suffix(".committed")
    first = marker.read_text()
    assert int(first) == journal.offset
    journal.append(_record(tenant.pk, "a2"))

    def crash(*args, **kwargs):
        raise OSError(errno.EIO, "crashed while renaming")

    monkeypatch.setattr(os, "replace", crash)
    asyncio.run(journal.flush())  # the steps are in the database; only the marker lags (replay is idempotent)
    monkeypatch.undo()
    assert marker.read_text() == first
    assert not list(tmp_path.glob("*.tmp"))
    journal.close()
    assert journal_recover(tmp_path) == 0
    assert Step.objects.count() == 2


def test_rejects_keep_no_content_are_private_and_bounded(tenant, tmp_path, settings):
    settings.AREAL_JOURNAL_REJECTED_MAX_BYTES = 2000
    journal = Journal(tmp_path)
    refused = [{**_full(tenant.pk, f"r{index}"), "prompt_tokens": -1} for index in range(30)]
    for record in refused:
        journal.append(record)
    asyncio.run(journal.flush())
    journal.close()
    files = sorted(tmp_path.glob("rejected.jsonl*"))
    assert [path.name for path in files] == ["rejected.jsonl", "rejected.jsonl.1"]
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert path.stat().st_size <= 2000
        assert "secret" not in path.read_text()
    kept = [
        json.loads(line) for path in reversed(files) for line in path.read_text().splitlines()
    ]  # oldest first
    assert kept
    assert all(entry["record"]["step_id"] and entry["error"] for entry in kept)
    assert kept[-1]["record"]["step_id"] == refused[-1]["step_id"]  # the newest are kept
