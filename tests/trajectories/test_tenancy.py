"""Trajectory ids cannot be used to cross tenants.

Gateway trajectory ids are derived from (tenant id, session id) with a public namespace, so anyone can
compute another tenant's future ids. An import therefore never chooses a primary key (it gets a fresh id
and keeps the record's id as `source_trajectory_id`), and every step write and read is scoped by tenant,
so even a colliding id (a legacy import, a planted row) never moves a step across tenants."""

import json
import uuid

import pytest

from apps.audit.models import AuditEvent
from apps.gateway.journal import _ingest_isolating
from apps.trajectories.models import Step, Trajectory, TrajectoryStatus, trajectory_id_for
from tests.trajectories.builders import atdp_record, gateway_step, imported, ingested
from tests.trajectories.factories import TrajectoryFactory

pytestmark = pytest.mark.django_db

LIST = "/api/v1/trajectories/"
EXPORT = "/api/v1/trajectories/export/"
IMPORT = "/api/v1/trajectories/import/"


def _jsonl(*records) -> bytes:
    return "".join(json.dumps(record) + "\n" for record in records).encode()


def _import(client, *records):
    return client.generic("POST", IMPORT, _jsonl(*records), content_type="application/x-ndjson")


def _body(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


def _empty_record(tenant, session_id: str, trajectory_id) -> dict:
    record = atdp_record(tenant, session_id, rewards=[])
    record["trajectory_id"] = str(trajectory_id)
    record["steps"] = []
    record["cost"] = {
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "latency_ms": 0,
        "ttft_ms": None,
        "usd": 0.0,
    }
    return record


@pytest.fixture
def attacker(api_client):
    return api_client(["trajectories:read", "trajectories:write"])


@pytest.fixture
def victim_reader(api_client, other_tenant):
    return api_client(["trajectories:read"], of=other_tenant)


def test_an_import_under_another_tenants_future_id_never_sees_their_steps(
    attacker, victim_reader, tenant, other_tenant
):
    """The attack: compute the victim's next gateway trajectory id, import an empty trajectory under it,
    let the victim's gateway record a step there, read it back."""
    future_id = trajectory_id_for(tenant_id=other_tenant.pk, session_id="victim-session")
    response = _import(attacker, _empty_record(tenant, "squat", future_id))
    assert response.status_code == 200, response.content
    (stored_id,) = response.json()["trajectory_ids"]
    assert stored_id != str(future_id)  # the importer does not choose the primary key
    squat = Trajectory.objects.get(pk=stored_id)
    assert squat.tenant == tenant
    assert squat.source_trajectory_id == future_id

    secret = gateway_step(
        other_tenant,
        "victim-session",
        observation={"messages": [{"role": "user", "content": "the victim's secret"}]},
    )
    victims = ingested(other_tenant, "victim-session", [secret])  # the victim's gateway journal lands
    assert victims.pk == future_id
    assert victims.tenant == other_tenant
    assert victims.step_count == 1

    for path in (f"{LIST}{future_id}/", f"{LIST}{stored_id}/"):
        response = attacker.get(path)
        assert b"the victim's secret" not in response.content
    assert attacker.get(f"{LIST}{future_id}/").status_code == 404
    assert attacker.get(f"{LIST}{stored_id}/").json()["steps"] == []
    assert b"the victim's secret" not in _body(attacker.get(EXPORT))
    assert b"the victim's secret" not in attacker.get(LIST).content

    theirs = victim_reader.get(f"{LIST}{future_id}/")
    assert theirs.status_code == 200
    assert [step["step_id"] for step in theirs.json()["steps"]] == [secret["step_id"]]


def test_an_import_answers_the_same_whether_another_tenant_holds_the_id_or_nobody_does(
    attacker, tenant, other_tenant
):
    theirs = ingested(other_tenant, "theirs", [gateway_step(other_tenant, "theirs")])
    taken = _import(attacker, _empty_record(tenant, "probe-taken", theirs.pk))
    free = _import(attacker, _empty_record(tenant, "probe-free", uuid.uuid4()))
    assert taken.status_code == free.status_code == 200
    assert taken.json()["accepted"] == free.json()["accepted"] == 1
    assert taken.json()["rejected"] == free.json()["rejected"] == []
    theirs.refresh_from_db()
    assert theirs.tenant == other_tenant
    assert theirs.step_count == 1

    # A duplicate inside the importer's own tenant is refused, with one text for its id and its session.
    again_by_id = _import(attacker, _empty_record(tenant, "probe-renamed", theirs.pk))
    again_by_session = _import(attacker, _empty_record(tenant, "probe-free", uuid.uuid4()))
    assert again_by_id.status_code == again_by_session.status_code == 400
    messages = {
        entry["message"] for entry in again_by_id.json()["rejected"] + again_by_session.json()["rejected"]
    }
    assert messages == {"a trajectory with this id or session already exists"}


def test_a_gateway_step_never_lands_in_another_tenants_trajectory_even_when_ids_collide(
    tenant, other_tenant, tmp_path
):
    """A row of tenant A holding the id the gateway derives for a session of tenant B (an import stored
    before ids were fresh, or any future collision): B's journalled step is refused and kept aside, never
    attached to A's trajectory."""
    colliding_id = trajectory_id_for(tenant_id=other_tenant.pk, session_id="collide")
    planted = TrajectoryFactory(
        id=colliding_id, tenant=tenant, session_id="planted", status=TrajectoryStatus.OPEN, steps=0
    )
    record = gateway_step(other_tenant, "collide")
    innocent = gateway_step(other_tenant, "unrelated")

    written = _ingest_isolating([record, innocent], tmp_path / "rejected.jsonl")

    assert written == 1  # the unrelated step of the same batch still lands
    assert not Step.objects.filter(trajectory=planted).exists()
    planted.refresh_from_db()
    assert planted.step_count == 0
    assert planted.tenant == tenant
    rejected = [json.loads(line) for line in (tmp_path / "rejected.jsonl").read_text().splitlines()]
    assert [entry["record"]["step_id"] for entry in rejected] == [record["step_id"]]
    assert Step.objects.get(id=innocent["step_id"]).trajectory.tenant == other_tenant


def test_another_tenants_step_attached_to_a_trajectory_is_never_read_back(attacker, tenant, other_tenant):
    """Rows written before steps were scoped (a step of B under A's trajectory) stay invisible to A."""
    mine = imported(tenant, "mine", rewards=[])
    leaked = gateway_step(
        other_tenant, "elsewhere", observation={"messages": [{"role": "user", "content": "leaked secret"}]}
    )
    ingested(other_tenant, "elsewhere", [leaked])
    Step.objects.filter(id=leaked["step_id"]).update(trajectory=mine, index=99)

    detail = attacker.get(f"{LIST}{mine.pk}/")
    assert detail.status_code == 200
    assert leaked["step_id"] not in {step["step_id"] for step in detail.json()["steps"]}
    assert b"leaked secret" not in attacker.get(LIST).content
    assert b"leaked secret" not in _body(attacker.get(EXPORT))
    assert b"leaked secret" not in _body(attacker.get(EXPORT, {"format": "parquet"}))


# ------------------------------------------------------------------------------------------------------ audit


def test_an_import_is_audited_per_stored_trajectory(attacker, tenant, other_tenant):
    first, second = atdp_record(tenant, "audited-1"), atdp_record(tenant, "audited-2")
    bad = atdp_record(tenant, "audited-bad")
    bad["steps"][1]["kind"] = "daydream"
    response = _import(attacker, first, bad, second)
    assert response.status_code == 200
    assert response.json()["accepted"] == 2
    events = list(AuditEvent.objects.filter(tenant=tenant, verb="trajectory.import").order_by("sequence"))
    assert [event.target_id for event in events] == response.json()["trajectory_ids"]
    assert [event.data["source_trajectory_id"] for event in events] == [
        first["trajectory_id"],
        second["trajectory_id"],
    ]
    assert events[0].actor_kind == "api_key"
    assert events[0].data["steps"] == len(first["steps"])
    assert not AuditEvent.objects.filter(tenant=other_tenant, verb="trajectory.import").exists()


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_an_export_is_audited_with_its_filters(attacker, tenant, other_tenant, kind):
    imported(tenant, "exported", rewards=[])
    response = attacker.get(EXPORT, {"format": kind, "purpose": "production"})
    assert response.status_code == 200
    _body(response)
    (event,) = AuditEvent.objects.filter(tenant=tenant, verb="trajectory.export")
    assert event.data["format"] == kind
    assert event.data["filters"] == {"purpose": "production"}
    assert event.actor_kind == "api_key"
    assert not AuditEvent.objects.filter(tenant=other_tenant, verb="trajectory.export").exists()
