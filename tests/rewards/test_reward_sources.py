"""Who may post which reward source, and idempotency keys namespaced by source and principal: an agent key
(through the gateway or REST) cannot take over an annotator's or an evaluator's reward by reusing its
predictable idempotency key, and cannot post as annotator or evaluator."""

import uuid

import httpx
import pytest

from apps.annotation.models import AnnotationItem
from apps.annotation.services import annotation_queue_create
from apps.audit.services import Actor
from apps.rewards.models import Reward
from apps.rewards.services import evaluator_create
from apps.rewards.tasks import run_evaluators
from apps.tenants.permissions import Role
from apps.tenants.services import api_key_create
from apps.trajectories.models import Trajectory
from tests.rewards.factories import SYSTEM, make_spec
from tests.trajectories.factories import StepFactory, TrajectoryFactory


def _key(tenant, *scopes) -> str:
    _, raw = api_key_create(
        tenant=tenant, actor=Actor.system("test"), name=f"k-{uuid.uuid4().hex[:6]}", scopes=list(scopes)
    )
    return raw


def _setting(tenant, member):
    """A trajectory in an annotation queue with one assigned annotator, and an evaluator over it."""
    spec = make_spec(tenant, name="quality", minimum=0, maximum=1)
    trajectory = TrajectoryFactory(tenant=tenant, task_id="support")
    annotator = member(Role.ANNOTATOR)
    queue = annotation_queue_create(
        tenant=tenant,
        actor=SYSTEM,
        name="q",
        spec_id=spec.pk,
        filters={"task_id": "support"},
        annotators_per_item=1,
        assignee_ids=[annotator.pk],
    )
    item = AnnotationItem.objects.get(queue=queue, trajectory=trajectory)
    evaluator = evaluator_create(
        tenant=tenant, actor=SYSTEM, name="says-answer", kind="regex", config={"pattern": "answer"}
    )
    return trajectory, annotator, item, evaluator


@pytest.mark.django_db(transaction=True)
def test_an_agent_key_cannot_take_annotator_or_evaluator_rewards_through_the_gateway(
    gateway_url, tenant, member, api_client
):
    trajectory, annotator, item, evaluator = _setting(tenant, member)
    headers = {"Authorization": f"Bearer {_key(tenant, 'rewards:write')}"}
    evaluator_key, annotation_key = (
        f"evaluator:{evaluator.pk}:{trajectory.pk}",
        f"annotation:{item.pk}:{annotator.pk}",
    )
    for key in (evaluator_key, annotation_key):  # claimed before the evaluator and the annotator act
        squat = httpx.post(
            f"{gateway_url}/v1/rewards",
            headers=headers,
            json={"session_id": trajectory.session_id, "value": 0.0, "idempotency_key": key},
        )
        assert squat.status_code == 201, squat.text
    for source in ("annotator", "evaluator"):
        claimed = httpx.post(
            f"{gateway_url}/v1/rewards",
            headers=headers,
            json={"session_id": trajectory.session_id, "value": 0.0, "source": source},
        )
        assert claimed.status_code == 422, claimed.text
        assert claimed.json()["error"]["param"] == "source", claimed.text

    assert run_evaluators.apply(args=[str(trajectory.pk)]).get()["results"] == {"says-answer@1": 1.0}
    labelled = api_client(user=annotator).post(
        f"/api/v1/annotation/items/{item.pk}/labels/", {"value": 1}, format="json"
    )
    assert labelled.status_code == 201, labelled.content

    rewards = Reward.objects.filter(trajectory=trajectory)
    assert sorted(rewards.values_list("source", "value")) == [
        ("agent", 0.0),
        ("agent", 0.0),
        ("annotator", 1.0),
        ("evaluator", 1.0),
    ]
    annotator_reward = Reward.objects.get(pk=labelled.json()["reward_id"])
    assert (annotator_reward.source, annotator_reward.created_by) == ("annotator", annotator.username)
    evaluator_reward = rewards.get(source="evaluator")
    # A repeat by the agent returns its own reward, never the evaluator's or the annotator's.
    for key in (evaluator_key, annotation_key):
        again = httpx.post(
            f"{gateway_url}/v1/rewards",
            headers=headers,
            json={"session_id": trajectory.session_id, "value": 0.0, "idempotency_key": key},
        )
        assert again.status_code == 200
        assert again.json()["source"] == "agent"
        assert again.json()["reward_id"] not in {str(evaluator_reward.pk), str(annotator_reward.pk)}
    assert rewards.count() == 4

    # The other order: the evaluator first, then the agent with its key: a new agent reward, and the
    # evaluator's stays its own (a re-run is still idempotent).
    second = TrajectoryFactory(tenant=tenant, task_id="other")
    run_evaluators.apply(args=[str(second.pk)]).get()
    late = httpx.post(
        f"{gateway_url}/v1/rewards",
        headers=headers,
        json={
            "session_id": second.session_id,
            "value": 0.0,
            "idempotency_key": f"evaluator:{evaluator.pk}:{second.pk}",
        },
    )
    assert late.status_code == 201
    assert late.json()["source"] == "agent"
    run_evaluators.apply(args=[str(second.pk)]).get()
    assert sorted(Reward.objects.filter(trajectory=second).values_list("source", "value")) == [
        ("agent", 0.0),
        ("evaluator", 1.0),
    ]


@pytest.mark.django_db(transaction=True)
def test_rl_set_reward_stores_an_agent_reward_whatever_the_body_claims(gateway_url, tenant, member):
    trajectory, annotator, item, _ = _setting(tenant, member)
    key = _key(tenant, "inference", "rewards:write")
    started = httpx.post(
        f"{gateway_url}/rl/start_session",
        json={"task_id": "support"},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert started.status_code == 200, started.text
    session = Trajectory.objects.get(tenant=tenant, session_id=started.json()["session_id"])
    step = StepFactory(
        trajectory=session,
        index=0,
        observation={"messages": []},
        action={"text": "hi"},
        result={},
        with_tokens=False,
    )
    set_reward = httpx.post(
        f"{gateway_url}/rl/set_reward",
        headers={"Authorization": f"Bearer {started.json()['api_key']}"},
        json={
            "reward": 0.0,
            "interaction_id": str(step.pk),
            "source": "annotator",
            "idempotency_key": f"annotation:{item.pk}:{annotator.pk}",
        },
    )
    assert set_reward.status_code == 200, set_reward.text
    stored = Reward.objects.get(pk=set_reward.json()["reward_id"])
    # the session endpoints' own namespace and key, never the body's (apps.rewards.selectors.SET_REWARD_SCOPE)
    assert (stored.source, stored.idempotency_scope, stored.idempotency_key) == (
        "agent",
        "agent/set_reward",
        f"{step.pk}#1",
    )


@pytest.mark.django_db
def test_a_rest_key_cannot_post_as_annotator_or_evaluator_nor_take_their_keys(api_client, member, tenant):
    trajectory, annotator, item, evaluator = _setting(tenant, member)
    client = api_client(["rewards:write", "trajectories:read"])
    for source in ("annotator", "evaluator"):
        refused = client.post(
            "/api/v1/rewards/",
            {"trajectory_id": str(trajectory.pk), "value": 1.0, "source": source},
            format="json",
        )
        assert refused.status_code == 403, refused.content
        assert refused.json()["error"]["code"] == "source_not_allowed", refused.content
    assert not Reward.objects.filter(trajectory=trajectory).exists()
    for key in (f"evaluator:{evaluator.pk}:{trajectory.pk}", f"annotation:{item.pk}:{annotator.pk}"):
        squat = client.post(
            "/api/v1/rewards/",
            {"trajectory_id": str(trajectory.pk), "value": 0.0, "source": "rule", "idempotency_key": key},
            format="json",
        )
        assert squat.status_code == 201
        assert squat.json()["source"] == "rule"
    run_evaluators.apply(args=[str(trajectory.pk)]).get()
    labelled = api_client(user=annotator).post(
        f"/api/v1/annotation/items/{item.pk}/labels/", {"value": 1}, format="json"
    )
    assert labelled.status_code == 201
    assert sorted(Reward.objects.filter(trajectory=trajectory).values_list("source", "value")) == [
        ("annotator", 1.0),
        ("evaluator", 1.0),
        ("rule", 0.0),
        ("rule", 0.0),
    ]
    # A person's session posts as annotator; naming another source is refused, not silently rewritten.
    person = api_client(user=member(Role.OPERATOR))
    as_agent = person.post(
        "/api/v1/rewards/",
        {"trajectory_id": str(trajectory.pk), "value": 0.5, "source": "evaluator"},
        format="json",
    )
    assert as_agent.status_code == 403
    assert as_agent.json()["error"]["code"] == "source_not_allowed"
    plain = person.post(
        "/api/v1/rewards/", {"trajectory_id": str(trajectory.pk), "value": 0.5}, format="json"
    )
    assert plain.status_code == 201
    assert plain.json()["source"] == "annotator"
