from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction

from apps.audit.models import AuditEvent
from apps.audit.services import Actor, audit_record, audit_verify
from apps.core.models import ImmutableRowError
from apps.tenants.services import api_key_create, policy_update

pytestmark = pytest.mark.django_db


@pytest.fixture
def chain(tenant, other_tenant):
    actor = Actor.system("test")
    for days in (10, 20, 30):
        policy_update(tenant=tenant, actor=actor, changes={"retention_days": days})
    api_key_create(tenant=tenant, actor=actor, name="k", scopes=["inference"])
    policy_update(tenant=other_tenant, actor=actor, changes={"retention_days": 5})
    return tenant


def test_chain_links_each_row_to_the_previous(chain):
    events = list(AuditEvent.objects.filter(tenant=chain).order_by("sequence"))
    assert [event.sequence for event in events] == [1, 2, 3, 4]
    assert all(
        later.previous_hash == earlier.hash for earlier, later in zip(events, events[1:], strict=False)
    )
    assert audit_verify(tenant=chain) == []


def test_an_edited_row_is_detected(chain):
    target = AuditEvent.objects.get(tenant=chain, sequence=2)
    AuditEvent.objects.filter(pk=target.pk).dangerously_writable().update(
        data={"retention_days": {"old": 10, "new": 9999}}
    )
    breaks = audit_verify(tenant=chain)
    assert [(item.sequence, item.problem) for item in breaks] == [
        (2, "content does not match its hash (edited)")
    ]
    with pytest.raises(CommandError, match="broken in 1 tenant"):
        call_command("verifyaudit", stdout=StringIO(), stderr=StringIO())


def test_a_deleted_row_is_detected(chain):
    AuditEvent.objects.filter(tenant=chain, sequence=3)._raw_delete(AuditEvent.objects.db)
    problems = {item.problem for item in audit_verify(tenant=chain)}
    assert "expected sequence 3" in problems
    assert "previous_hash does not match the row before" in problems


def test_rehashing_an_edited_row_still_breaks_the_next_link(chain):
    from apps.audit.services import _row_hash

    target = AuditEvent.objects.get(tenant=chain, sequence=2)
    target.verb = "policy.view"
    AuditEvent.objects.filter(pk=target.pk).dangerously_writable().update(
        verb=target.verb, hash=_row_hash(target)
    )
    assert [item.sequence for item in audit_verify(tenant=chain)] == [3]


def test_intact_chains_verify(chain):
    out = StringIO()
    call_command("verifyaudit", stdout=out)
    assert "acme: chain intact" in out.getvalue()
    assert "globex: chain intact" in out.getvalue()


def test_rows_are_append_only(chain):
    event = AuditEvent.objects.filter(tenant=chain).first()
    event.verb = "changed"
    with pytest.raises(ImmutableRowError):
        event.save()
    with pytest.raises(ImmutableRowError):
        event.delete()


def test_event_rolls_back_with_its_act(tenant):
    def record_then_fail():
        with transaction.atomic():
            audit_record(tenant=tenant, actor=Actor.system("test"), verb="tenant.rename")
            1 / 0  # noqa: B018

    with pytest.raises(ZeroDivisionError):
        record_then_fail()
    assert not AuditEvent.objects.filter(tenant=tenant).exists()


@pytest.mark.django_db(transaction=True)
def test_recording_outside_a_transaction_is_refused(tenant):
    with pytest.raises(RuntimeError, match="inside the transaction"):
        audit_record(tenant=tenant, actor=Actor.system("test"), verb="x")


@pytest.mark.django_db(transaction=True)
def test_audit_filters_over_the_api(api_client, chain):
    client = api_client(["admin"])
    keys_only = client.get("/api/v1/audit/?verb=api_key.").json()["results"]
    assert {row["verb"] for row in keys_only} == {"api_key.create"}
    assert len(keys_only) == 2
    paged = client.get("/api/v1/audit/?page_size=2").json()
    assert len(paged["results"]) == 2
    assert paged["next"]
    bad = client.get("/api/v1/audit/?since=yesterday")
    assert bad.status_code == 400
    assert "since" in bad.json()["error"]["fields"]
    assert client.get("/api/v1/audit/verify/").json() == {"intact": True, "breaks": []}
