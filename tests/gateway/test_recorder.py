"""The journal's recorder process (apps/gateway/recorder.py): it stores the batches the web process hands it
by byte range, reading them back from the journal (a refused record set aside, the others stored, the marker
advanced); a batch it cannot take because it died is stored by the web process, and the next batch starts a new
recorder; a record the file could not take is stored by the web process. Real processes on the test
database (committed rows: a recorder cannot see a test's open transaction)."""

import asyncio
import json
import os
import signal

import pytest

from apps.gateway.journal import Journal, journal_recover
from apps.gateway.recorder import Recorder
from apps.trajectories.models import Step
from tests.gateway.test_journal import _record

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def recorder():
    recorder = Recorder()
    yield recorder
    recorder.close()


def _stored(tenant) -> set[str]:
    return set(map(str, Step.objects.filter(tenant=tenant).values_list("id", flat=True)))


def test_the_recorder_stores_each_batch_from_the_journal(tenant, tmp_path, recorder):
    journal = Journal(tmp_path, recorder=recorder)
    first = [_record(tenant.pk, f"first-{index}") for index in range(3)]
    refused = _record(tenant.pk, "refused", tokens=-1)  # a negative count: the database's check refuses it
    for record in (first[0], refused, first[1], first[2]):
        journal.append(record)
    assert asyncio.run(journal.flush()) == 3
    journal.append(later := _record(tenant.pk, "later"))
    assert asyncio.run(journal.flush()) == 1  # the next batch starts where the last one ended
    journal.close()

    assert _stored(tenant) == {record["step_id"] for record in [*first, later]}
    rejected = [json.loads(line) for line in (tmp_path / "rejected.jsonl").read_text().splitlines()]
    assert [entry["record"]["step_id"] for entry in rejected] == [refused["step_id"]]
    assert journal.committed == journal.offset
    assert journal_recover(tmp_path) == 0  # the marker says everything is stored


def test_a_batch_the_dead_recorder_cannot_take_is_stored_by_the_web_process(tenant, tmp_path, recorder):
    journal = Journal(tmp_path, recorder=recorder)
    journal.append(before := _record(tenant.pk, "before"))
    asyncio.run(journal.flush())
    killed = recorder.pid()
    os.kill(killed, signal.SIGKILL)

    journal.append(orphaned := _record(tenant.pk, "orphaned"))
    assert asyncio.run(journal.flush()) == 1  # stored here: the recorder is gone
    journal.append(after := _record(tenant.pk, "after"))
    assert asyncio.run(journal.flush()) == 1  # by a new recorder
    journal.close()

    assert _stored(tenant) == {before["step_id"], orphaned["step_id"], after["step_id"]}
    assert recorder.pid() not in (None, killed)
    assert journal_recover(tmp_path) == 0


def test_a_record_the_file_could_not_take_is_stored_by_the_web_process(tenant, tmp_path, recorder):
    journal = Journal(tmp_path, recorder=recorder)
    journal.append(journalled := _record(tenant.pk, "journalled"))
    journal.append_unjournalled(held := _record(tenant.pk, "held in memory"))
    assert asyncio.run(journal.flush()) == 2
    journal.append(after := _record(tenant.pk, "after"))
    assert asyncio.run(journal.flush()) == 1
    journal.close()
    assert _stored(tenant) == {journalled["step_id"], held["step_id"], after["step_id"]}
