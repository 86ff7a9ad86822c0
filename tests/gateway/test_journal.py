"""The journal's flusher when the database refuses a record: the others are stored, the refused one is set
aside with its error (rejected.jsonl), and nothing blocks the steps that follow."""

import asyncio
import json
import uuid

import pytest

from apps.gateway.journal import Journal, journal_recover
from apps.trajectories.models import Step

pytestmark = pytest.mark.django_db(transaction=True)


def _record(tenant_id: int, session: str, tokens: int = 1) -> dict:
    return {"step_id": str(uuid.uuid4()), "tenant_id": tenant_id, "session_id": session, "endpoint": "chat",
            "prompt_tokens": tokens, "completion_tokens": 1}


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
