"""Retention is enforced: the beat task deletes trajectories past `retention_until` (or past the tenant's
retention_days when none was recorded) with their steps, rewards, reviews, qualification and annotations,
in bounded batches, idempotently, audited once per tenant per run; a trajectory an unfinished training job
needs is held; admins see the dry-run count over REST and on the console's policy page."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from apps.annotation.models import AnnotationItem, AnnotationLabel
from apps.annotation.services import annotation_label_submit, annotation_queue_create
from apps.audit.models import AuditEvent
from apps.audit.services import Actor
from apps.qualification.models import Qualification, Review
from apps.rewards.models import Reward
from apps.tenants.permissions import Role
from apps.training.models import JobStatus, TrainingJob
from apps.trajectories.models import Step, Trajectory
from apps.trajectories.retention import trajectories_purge_expired
from apps.trajectories.tasks import purge_expired_trajectories
from tests.qualification.factories import QualificationFactory, ReviewFactory
from tests.rewards.factories import SYSTEM, RewardFactory, make_spec
from tests.training.factories import TrainingJobFactory
from tests.trajectories.factories import TrajectoryFactory

pytestmark = pytest.mark.django_db


def _planted(tenant, member):
    """Past retention: `old` (with content everywhere), `undated` (no retention_until, started long ago) and
    `needed` (in a queued training job's snapshot). Within retention: `fresh` and `recent_undated`."""
    now = timezone.now()
    spec = make_spec(tenant, name="quality", kind="boolean")
    old = TrajectoryFactory(
        tenant=tenant, task_id="old", text="a secret prompt", retention_until=now - timedelta(hours=1)
    )
    RewardFactory(trajectory=old, source="user", value=1.0)
    RewardFactory(
        trajectory=old,
        value=0.0,
        kind="critique",
        label="it should have said the secret",
        source="user",
    )
    annotator = member(Role.ANNOTATOR)
    queue = annotation_queue_create(
        tenant=tenant,
        actor=SYSTEM,
        name="old",
        spec_id=spec.pk,
        filters={"task_id": "old"},
        annotators_per_item=1,
        assignee_ids=[annotator.pk],
    )
    item = AnnotationItem.objects.get(queue=queue)
    annotation_label_submit(
        tenant=tenant,
        actor=Actor.user(annotator),
        user=annotator,
        item_id=item.pk,
        value=1,
        comment="about the secret",
        correction="a better secret",
    )
    ReviewFactory(trajectory=old, status="approved", note="looked at the secret")
    QualificationFactory(trajectory=old, content_hash="h")
    undated = TrajectoryFactory(tenant=tenant, started_at=now - timedelta(days=91))
    needed = TrajectoryFactory(tenant=tenant, retention_until=now - timedelta(days=1))
    fresh = TrajectoryFactory(tenant=tenant, retention_until=now + timedelta(days=30))
    recent_undated = TrajectoryFactory(tenant=tenant, started_at=now - timedelta(days=10))
    TrainingJobFactory(
        tenant=tenant,
        algorithm="sft",
        status=JobStatus.QUEUED,
        dataset_snapshot={"trajectory_ids": [str(needed.pk), str(fresh.pk)]},
    )
    return {
        "old": old,
        "undated": undated,
        "needed": needed,
        "fresh": fresh,
        "recent_undated": recent_undated,
    }


def test_the_beat_task_deletes_what_is_past_retention_with_its_content(tenant, other_tenant, member):
    planted = _planted(tenant, member)
    theirs = TrajectoryFactory(tenant=other_tenant, retention_until=timezone.now() + timedelta(days=1))
    their_old = TrajectoryFactory(tenant=other_tenant, retention_until=timezone.now() - timedelta(days=1))
    old = planted["old"]
    assert Step.objects.filter(trajectory=old).exists()
    assert AnnotationLabel.objects.filter(tenant=tenant).exists()

    result = purge_expired_trajectories.apply().get()

    assert result[tenant.slug]["trajectories"] == 2
    assert result[tenant.slug]["held_by_training"] == 1
    assert result[other_tenant.slug]["trajectories"] == 1
    assert set(Trajectory.objects.filter(tenant=tenant).values_list("pk", flat=True)) == {
        planted["needed"].pk,
        planted["fresh"].pk,
        planted["recent_undated"].pk,
    }
    assert list(Trajectory.objects.filter(tenant=other_tenant).values_list("pk", flat=True)) == [theirs.pk]
    for gone in (old.pk, planted["undated"].pk, their_old.pk):
        assert not Step.objects.filter(trajectory_id=gone).exists()
        assert not Reward.objects.filter(trajectory_id=gone).exists()
    assert not AnnotationItem.objects.filter(tenant=tenant).exists()
    assert not AnnotationLabel.objects.filter(tenant=tenant).exists()
    assert not Review.objects.filter(tenant=tenant).exists()
    assert not Qualification.objects.filter(tenant=tenant).exists()
    assert Step.objects.filter(trajectory=planted["needed"]).count() == 2  # held for the queued job

    event = AuditEvent.objects.get(tenant=tenant, verb="trajectory.retention_purge")
    assert event.actor_label == "retention"
    assert event.data["trajectories"] == 2
    assert event.data["deleted"]["trajectories.Step"] == 4
    assert event.data["deleted"]["rewards.Reward"] == 4
    assert event.data["deleted"]["annotation.AnnotationLabel"] == 1
    assert AuditEvent.objects.filter(tenant=other_tenant, verb="trajectory.retention_purge").count() == 1

    again = purge_expired_trajectories.apply().get()  # idempotent: nothing left, no new event
    assert tenant.slug not in again or again[tenant.slug]["trajectories"] == 0
    assert AuditEvent.objects.filter(verb="trajectory.retention_purge").count() == 2

    TrainingJob.objects.filter(tenant=tenant).update(status=JobStatus.SUCCEEDED)  # the job is done with it
    assert purge_expired_trajectories.apply().get()[tenant.slug]["trajectories"] == 1
    assert not Trajectory.objects.filter(pk=planted["needed"].pk).exists()


def test_a_run_deletes_in_bounded_batches_and_leaves_the_rest_for_the_next(tenant):
    past = timezone.now() - timedelta(days=1)
    for _ in range(5):
        TrajectoryFactory(tenant=tenant, retention_until=past, steps=1)
    first = trajectories_purge_expired(tenant=tenant, batch_size=2, max_batches=2)
    assert (first["trajectories"], first["batches"], first["remaining"]) == (4, 2, 1)
    assert Trajectory.objects.filter(tenant=tenant).count() == 1
    second = trajectories_purge_expired(tenant=tenant, batch_size=2, max_batches=2)
    assert (second["trajectories"], second["remaining"]) == (1, 0)
    assert AuditEvent.objects.filter(tenant=tenant, verb="trajectory.retention_purge").count() == 2


def test_admins_get_the_dry_run_count_over_rest(api_client, member, tenant, other_tenant):
    planted = _planted(tenant, member)
    TrajectoryFactory(tenant=other_tenant, retention_until=timezone.now() - timedelta(days=1))
    summary = api_client(user=member(Role.ADMIN)).get("/api/v1/trajectories/retention/")
    assert summary.status_code == 200, summary.content
    assert summary.json() == {"retention_days": 90, "past_retention": 3, "held_by_training": 1, "to_purge": 2}
    by_key = api_client(["admin"]).get("/api/v1/trajectories/retention/")
    assert by_key.status_code == 200
    assert by_key.json()["to_purge"] == 2
    assert api_client(user=member(Role.OPERATOR)).get("/api/v1/trajectories/retention/").status_code == 403
    assert api_client(["trajectories:read"]).get("/api/v1/trajectories/retention/").status_code == 403
    assert Trajectory.objects.filter(pk=planted["old"].pk).exists()  # a dry run deletes nothing


def test_the_policy_page_shows_how_many_will_be_purged(admin_user, member, tenant):
    _planted(tenant, member)
    client = Client()
    client.force_login(admin_user)
    page = client.get("/settings/policy/")
    assert page.status_code == 200
    text = " ".join(page.content.decode().split())
    assert "2 trajectories past retention will be purged" in text
    assert "1 more is held until the training job using it ends" in text


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_runs_the_purge(tmp_path, tenant):
    from tests.workers_support import celery_worker

    expired = TrajectoryFactory(tenant=tenant, retention_until=timezone.now() - timedelta(days=1))
    kept = TrajectoryFactory(tenant=tenant, retention_until=timezone.now() + timedelta(days=1))
    with celery_worker(log_path=tmp_path / "worker.log") as (_, queue):
        result = purge_expired_trajectories.apply_async(queue=queue).get(timeout=90)
    assert result[tenant.slug]["trajectories"] == 1
    assert list(Trajectory.objects.filter(tenant=tenant).values_list("pk", flat=True)) == [kept.pk]
    assert not Step.objects.filter(trajectory_id=expired.pk).exists()
    assert AuditEvent.objects.filter(tenant=tenant, verb="trajectory.retention_purge").count() == 1


def test_what_the_control_plane_quotes_of_a_purged_trajectory_goes_with_it(tenant, member, api_client):
    """A harness exemplar taken from a rewarded conversation, and a tool-failure cluster whose examples and
    arguments come from failing ones: once those trajectories are past retention and the beat task purged
    them, none of their text is in the evolution tables, its REST API or its console page."""
    from apps.evolution.models import HarnessVersion, SignalPoint, ToolFailureCluster
    from tests.evolution.factories import AutoPolicyFactory
    from tests.evolution.test_harness_review import (
        AGENT,
        HOSTILE_KEY,
        PLANTED,
        ROUTED,
        _fire,
        _harnessed_production,
        _watching,
    )

    policy = AutoPolicyFactory(tenant=tenant, **_watching())
    _harnessed_production(tenant, policy, agent_name=AGENT, tool_routing=ROUTED)
    harness, _, _ = _fire(tenant, policy, successes=[(PLANTED + " In {city}?", ())])
    (cluster,) = ToolFailureCluster.objects.filter(policy=policy)
    assert PLANTED in str(harness.exemplars)  # quoted before the purge
    assert HOSTILE_KEY in str(cluster.example_arguments)
    reader = Client()
    reader.force_login(member(Role.ADMIN))
    rest = api_client(user=member(Role.ADMIN))

    def everything() -> str:
        return " ".join(
            [
                str(list(HarnessVersion.objects.values_list("exemplars", "system_prompt"))),
                str(
                    list(ToolFailureCluster.objects.values_list("examples", "example_arguments", "signature"))
                ),
                str(list(SignalPoint.objects.values_list("details", flat=True))),
                rest.get("/api/v1/evolution/harness-versions/").content.decode(),
                rest.get(f"/api/v1/evolution/clusters/?policy={policy.pk}").content.decode(),
                reader.get(f"/evolution/policies/{policy.pk}/").content.decode(),
            ]
        )

    assert PLANTED in everything()
    quoted = Trajectory.objects.filter(tenant=tenant, agent_name=AGENT)
    ids = {str(pk) for pk in quoted.values_list("pk", flat=True)}
    quoted.update(retention_until=timezone.now() - timedelta(minutes=1))

    purge_expired_trajectories()

    assert not Trajectory.objects.filter(pk__in=ids).exists()
    after = everything()
    assert PLANTED not in after
    assert HOSTILE_KEY not in after  # the failing calls' arguments
    assert '"city": "Oslo"' not in after
    assert not any(trajectory_id in after for trajectory_id in ids)
    assert not ToolFailureCluster.objects.filter(policy=policy).exists()  # its every example went
    harness.refresh_from_db()
    assert harness.exemplars == []
    assert (harness.tool_routing, harness.label) == (ROUTED, "h2")  # the rest of the version stays
    assert AuditEvent.objects.filter(tenant=tenant, verb="harness_version.exemplars_forget").count() == 1
