"""The role × action matrix for the actions of rewards, qualification and annotation over real endpoints:
allowed requests pass the role check, denied ones get 403 role_forbidden and change nothing."""

import pytest

from apps.annotation.models import AnnotationLabel, AnnotationQueue
from apps.annotation.services import annotation_queue_create
from apps.audit.models import AuditEvent
from apps.qualification.models import Qualification, Review
from apps.rewards.models import Evaluator, Reward, RewardSpec
from apps.tenants.permissions import Action, Role, role_can
from tests.rewards.factories import SYSTEM, make_spec
from tests.trajectories.factories import TrajectoryFactory

pytestmark = pytest.mark.django_db

MINE = [
    Action.REWARD_VIEW,
    Action.REWARD_WRITE,
    Action.REWARD_OVERRIDE,
    Action.REWARD_SPEC_MANAGE,
    Action.EVALUATOR_MANAGE,
    Action.TRAJECTORY_REVIEW,
    Action.QUALIFICATION_RUN,
    Action.QUALIFICATION_OVERRIDE,
    Action.ANNOTATION_VIEW,
    Action.ANNOTATION_LABEL,
    Action.ANNOTATION_MANAGE,
]


def _snapshot(tenant):
    return (
        Reward.objects.filter(tenant=tenant).count(),
        RewardSpec.objects.filter(tenant=tenant).count(),
        Evaluator.objects.filter(tenant=tenant).count(),
        Review.objects.filter(tenant=tenant).count(),
        list(Qualification.objects.filter(tenant=tenant).values_list("status", flat=True)),
        AnnotationQueue.objects.filter(tenant=tenant).count(),
        AnnotationLabel.objects.count(),
        AuditEvent.objects.filter(tenant=tenant).exclude(verb__startswith="auth.").count(),
    )


def _request(action, client, context):
    trajectory, queue, item = context["trajectory"], context["queue"], context["item"]
    if action is Action.REWARD_VIEW:
        return client.get("/api/v1/rewards/")
    if action is Action.REWARD_WRITE:
        return client.post(
            "/api/v1/rewards/", {"trajectory_id": str(trajectory.pk), "value": 1}, format="json"
        )
    if action is Action.REWARD_OVERRIDE:
        return client.post(
            "/api/v1/rewards/",
            {"trajectory_id": str(trajectory.pk), "value": 0, "override": True, "reason": "r"},
            format="json",
        )
    if action is Action.REWARD_SPEC_MANAGE:
        return client.post("/api/v1/reward-specs/", {"name": "n", "kind": "numeric"}, format="json")
    if action is Action.EVALUATOR_MANAGE:
        return client.post(
            "/api/v1/evaluators/", {"name": "e", "kind": "regex", "config": {"pattern": "x"}}, format="json"
        )
    if action is Action.TRAJECTORY_REVIEW:
        return client.post(
            "/api/v1/reviews/", {"trajectory_id": str(trajectory.pk), "status": "approved"}, format="json"
        )
    if action is Action.QUALIFICATION_RUN:
        return client.post(f"/api/v1/qualification/{trajectory.pk}/run/")
    if action is Action.QUALIFICATION_OVERRIDE:
        return client.post(
            f"/api/v1/qualification/{trajectory.pk}/override/",
            {"status": "disqualified", "reason": "r"},
            format="json",
        )
    if action is Action.ANNOTATION_VIEW:
        return client.get("/api/v1/annotation/queues/")
    if action is Action.ANNOTATION_LABEL:
        return client.post(f"/api/v1/annotation/items/{item.pk}/labels/", {"value": 1}, format="json")
    if action is Action.ANNOTATION_MANAGE:
        return client.post(
            "/api/v1/annotation/queues/", {"name": "q2", "spec_id": queue.spec_id}, format="json"
        )
    raise AssertionError(action)


@pytest.mark.parametrize("role", list(Role))
@pytest.mark.parametrize("action", MINE)
def test_role_action_matrix(role, action, tenant, api_client, member):
    user = member(role)
    spec = make_spec(tenant, name="ok", kind="boolean")
    trajectory = TrajectoryFactory(tenant=tenant)
    queue = annotation_queue_create(
        tenant=tenant,
        actor=SYSTEM,
        name="q",
        spec_id=spec.pk,
        filters={},
        annotators_per_item=1,
        assignee_ids=[user.pk] if role_can(role, Action.ANNOTATION_LABEL) else [],
    )
    context = {"trajectory": trajectory, "queue": queue, "item": queue.items.get()}
    before = _snapshot(tenant)
    response = _request(action, api_client(user=user), context)
    if role_can(role, action):
        assert response.status_code in {200, 201, 202}, response.content
    else:
        assert response.status_code == 403, response.content
        assert response.json()["error"]["code"] == "role_forbidden"
        assert _snapshot(tenant) == before


def test_annotators_label_but_cannot_override_or_review():
    assert role_can(Role.ANNOTATOR, Action.ANNOTATION_LABEL)
    assert role_can(Role.ANNOTATOR, Action.REWARD_WRITE)
    for action in (
        Action.QUALIFICATION_OVERRIDE,
        Action.REWARD_OVERRIDE,
        Action.TRAJECTORY_REVIEW,
        Action.ANNOTATION_MANAGE,
    ):
        assert not role_can(Role.ANNOTATOR, action)
    assert [action for action in MINE if role_can(Role.VIEWER, action)] == [
        Action.REWARD_VIEW,
        Action.ANNOTATION_VIEW,
    ]
