"""Append-only history (apps.core.models.ImmutableModel): audit events, release records (status moves,
analysis ticks, serving history) and alias moves are inserted once and never changed or deleted through the
application, one row at a time or in bulk; a cascade from the row they belong to still removes them."""

import pytest
from django.db import IntegrityError, transaction

from apps.audit.models import AuditEvent
from apps.core.models import ImmutableRowError
from apps.releases.approval import release_approve
from apps.releases.models import AnalysisRun, Release, ReleaseEvent, ReleaseStatus, ServingEvent
from apps.training.models import AliasMove
from tests.releases.helpers import SYSTEM, release_at, release_row

pytestmark = pytest.mark.django_db

# (model, a text field to try to change)
HISTORY = [
    (AuditEvent, "verb"),
    (ReleaseEvent, "reason"),
    (AnalysisRun, "verdict"),
    (ServingEvent, "reason"),
    (AliasMove, "reason"),
]
IDS = [model.__name__ for model, _ in HISTORY]


@pytest.fixture
def history(tenant):
    """A promoted release: audit events, release events, serving history and alias moves, plus one
    analysis tick."""
    release = release_at(tenant, ReleaseStatus.AWAITING_APPROVAL, stage_index=3)
    release_approve(tenant=tenant, actor=SYSTEM, release_id=release.pk)
    AnalysisRun.objects.create(tenant=tenant, release=release, stage_index=3, verdict="pass", decision="hold")
    return tenant


def _row(model, tenant):
    row = model.objects.for_tenant(tenant).order_by("pk").first()
    assert row is not None, f"the fixture made no {model.__name__}"
    return row


@pytest.mark.parametrize(("model", "field"), HISTORY, ids=IDS)
def test_saving_a_row_again_is_refused(model, field, history):
    row = _row(model, history)
    before = getattr(row, field)
    setattr(row, field, "rewritten")
    with pytest.raises(ImmutableRowError):
        row.save()
    with pytest.raises(ImmutableRowError):
        row.save(update_fields=[field])
    assert getattr(model.objects.get(pk=row.pk), field) == before


@pytest.mark.parametrize(("model", "field"), HISTORY, ids=IDS)
def test_a_new_instance_cannot_overwrite_a_row_by_its_key(model, field, history):
    row = _row(model, history)
    before = getattr(row, field)
    copy = model.objects.get(pk=row.pk)
    copy._state.adding = True  # as if built by hand with the row's primary key
    setattr(copy, field, "rewritten")
    with pytest.raises(IntegrityError), transaction.atomic():
        copy.save()
    assert getattr(model.objects.get(pk=row.pk), field) == before


@pytest.mark.parametrize(("model", "field"), HISTORY, ids=IDS)
def test_deleting_a_row_is_refused(model, field, history):
    row = _row(model, history)
    with pytest.raises(ImmutableRowError):
        row.delete()
    assert model.objects.filter(pk=row.pk).exists()


@pytest.mark.parametrize(("model", "field"), HISTORY, ids=IDS)
def test_bulk_updates_are_refused(model, field, history):
    row = _row(model, history)
    before = getattr(row, field)
    with pytest.raises(ImmutableRowError):
        model.objects.filter(pk=row.pk).update(**{field: "rewritten"})
    with pytest.raises(ImmutableRowError):
        model.objects.update(**{field: "rewritten"})
    setattr(row, field, "rewritten")
    with pytest.raises(ImmutableRowError):
        model.objects.bulk_update([row], [field])
    assert getattr(model.objects.get(pk=row.pk), field) == before


@pytest.mark.parametrize(("model", "field"), HISTORY, ids=IDS)
def test_bulk_deletes_are_refused(model, field, history):
    count = model.objects.for_tenant(history).count()
    with pytest.raises(ImmutableRowError):
        model.objects.for_tenant(history).delete()
    with pytest.raises(ImmutableRowError):
        model.objects.all().delete()
    assert model.objects.for_tenant(history).count() == count


def test_the_named_bypass_writes(history):
    row = _row(AuditEvent, history)
    assert AuditEvent.objects.filter(pk=row.pk).dangerously_writable().update(verb="tampered") == 1
    assert AuditEvent.objects.get(pk=row.pk).verb == "tampered"


def test_a_release_deleted_takes_its_history_with_it(tenant):
    release = release_row(tenant)
    ReleaseEvent.objects.create(
        tenant=tenant, release=release, from_status="draft", to_status="aborted", actor="t"
    )
    AnalysisRun.objects.create(tenant=tenant, release=release, stage_index=0, verdict="pass", decision="hold")
    Release.objects.filter(pk=release.pk).delete()
    assert not ReleaseEvent.objects.filter(release_id=release.pk).exists()
    assert not AnalysisRun.objects.filter(release_id=release.pk).exists()
