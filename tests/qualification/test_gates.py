"""Each gate proven by a trajectory that fails only that gate, on real rows; the pure gate functions on
plain facts."""

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.qualification.models import QualificationReason
from apps.qualification.services import qualification_evaluate, review_set
from apps.qualification.tasks import evaluate_trajectory
from apps.tenants.models import TenantPolicy
from apps.trajectories.models import Step
from tests.qualification.factories import QualificationLimitsFactory
from tests.rewards.factories import SYSTEM
from workers.qualification.gates import GATE_CODES, Limits, StepFacts, TrajectoryFacts, evaluate

pytestmark = pytest.mark.django_db


def _reasons(trajectory):
    return qualification_evaluate(trajectory_id=trajectory.pk).reasons


def test_a_good_trajectory_qualifies_through_the_task(good_trajectory):
    trajectory = good_trajectory()
    result = evaluate_trajectory.apply(args=[str(trajectory.pk)]).get()
    assert result == {"trajectory_id": str(trajectory.pk), "status": "qualified", "reasons": []}
    assert trajectory.qualification.training_reward == 0.8
    assert len(trajectory.qualification.content_hash) == 64


def test_trajectory_complete(good_trajectory):
    assert _reasons(good_trajectory(status="open")) == ["trajectory_complete"]


def test_has_training_reward(good_trajectory):
    assert _reasons(good_trajectory(reward=None)) == ["has_training_reward"]


def test_consent_allows_training(good_trajectory):
    assert _reasons(good_trajectory(consent="metadata_only")) == ["consent_allows_training"]
    assert _reasons(good_trajectory(training_use=False)) == ["consent_allows_training"]


def test_pii_policy_satisfied(good_trajectory):
    trajectory = good_trajectory()
    Step.objects.filter(trajectory=trajectory, index=1).update(pii_entities=["email"])
    assert _reasons(trajectory) == ["pii_policy_satisfied"]
    Step.objects.filter(trajectory=trajectory, index=1).update(retokenized=True)
    assert _reasons(trajectory) == []


def test_token_data_complete(good_trajectory):
    assert _reasons(good_trajectory(with_tokens=False)) == ["token_data_complete"]
    trajectory = good_trajectory()
    Step.objects.filter(trajectory=trajectory, index=0).update(completion_logprobs=None)
    assert _reasons(trajectory) == ["token_data_complete"]


def test_not_retry_orphan(good_trajectory):
    trajectory = good_trajectory()
    Step.objects.filter(trajectory=trajectory, index=1).update(retry_of=uuid.uuid4())
    assert _reasons(trajectory) == ["not_retry_orphan"]


def test_purpose_production(good_trajectory):
    assert _reasons(good_trajectory(purpose="eval")) == ["purpose_production"]


def test_reviewed_if_required(good_trajectory, tenant):
    TenantPolicy.objects.filter(tenant=tenant).update(review_required=True)
    trajectory = good_trajectory()
    assert _reasons(trajectory) == ["reviewed_if_required"]
    review_set(tenant=tenant, actor=SYSTEM, trajectory_id=trajectory.pk, status="approved")
    assert _reasons(trajectory) == []
    review_set(tenant=tenant, actor=SYSTEM, trajectory_id=trajectory.pk, status="needs_changes", note="tone")
    assert _reasons(trajectory) == ["reviewed_if_required"]


def test_within_length_limits(good_trajectory, tenant):
    QualificationLimitsFactory(tenant=tenant, max_steps=2, max_tokens=1000)
    assert _reasons(good_trajectory(steps=3)) == ["within_length_limits"]
    assert _reasons(good_trajectory(steps=2)) == []


def test_not_duplicate(good_trajectory, tenant, eager_tasks, django_capture_on_commit_callbacks):
    now = timezone.now()
    later = good_trajectory(text="same exchange", started_at=now)
    earlier = good_trajectory(text="same exchange", started_at=now - timedelta(minutes=5))
    assert _reasons(later) == []  # alone so far
    with django_capture_on_commit_callbacks(execute=True):
        assert _reasons(earlier) == []
    later.qualification.refresh_from_db()
    assert later.qualification.reasons == ["not_duplicate"]  # re-queued when the original was judged
    assert list(QualificationReason.objects.filter(tenant=tenant).values_list("code", flat=True)) == [
        "not_duplicate"
    ]


def test_pure_gates_fail_alone():
    good = TrajectoryFacts()
    assert evaluate(good, Limits()).reasons == ()
    broken = {
        "trajectory_complete": TrajectoryFacts(status="aborted"),
        "has_training_reward": TrajectoryFacts(training_reward=None),
        "consent_allows_training": TrajectoryFacts(consent="none"),
        "pii_policy_satisfied": TrajectoryFacts(steps=(StepFacts("a", pii_redacted=True),)),
        "token_data_complete": TrajectoryFacts(steps=(StepFacts("a", tokens_consistent=False),)),
        "not_retry_orphan": TrajectoryFacts(steps=(StepFacts("a"), StepFacts("b", aborted=True))),
        "purpose_production": TrajectoryFacts(purpose="replay"),
        "reviewed_if_required": TrajectoryFacts(review_status="rejected"),
        "within_length_limits": TrajectoryFacts(total_tokens=10**9),
        "not_duplicate": TrajectoryFacts(is_duplicate=True),
    }
    assert set(broken) == set(GATE_CODES)
    for code, facts in broken.items():
        verdict = evaluate(facts, Limits())
        assert (verdict.status, verdict.reasons) == ("disqualified", (code,)), code
