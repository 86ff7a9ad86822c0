"""Annotation queues over the REST API and console: two annotators label, agreement comes out, an item is
never shown twice to one annotator, an unassigned annotator's label is refused with nothing stored."""

import json

import pytest

from apps.annotation.models import AnnotationItem, AnnotationLabel, AnnotationQueue
from apps.annotation.services import annotation_queue_create
from apps.audit.models import AuditEvent
from apps.rewards.models import Reward
from apps.rewards.selectors import training_reward
from apps.tenants.permissions import Role
from tests.rewards.factories import SYSTEM, make_spec
from tests.trajectories.factories import TrajectoryFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def setup(tenant, other_tenant, member):
    spec = make_spec(tenant, name="helpful", kind="boolean")
    trajectories = [
        TrajectoryFactory(tenant=tenant, task_id="support", text=f"t{number}") for number in range(3)
    ]
    TrajectoryFactory(tenant=tenant, task_id="other")
    ann_a, ann_b, outsider = member(Role.ANNOTATOR), member(Role.ANNOTATOR), member(Role.ANNOTATOR)
    their_spec = make_spec(other_tenant, name="theirs", kind="boolean")
    TrajectoryFactory(tenant=other_tenant, task_id="support")
    theirs = annotation_queue_create(
        tenant=other_tenant,
        actor=SYSTEM,
        name="theirs",
        spec_id=their_spec.pk,
        filters={"task_id": "support"},
        annotators_per_item=1,
        assignee_ids=[],
    )
    return {
        "spec": spec,
        "trajectories": trajectories,
        "a": ann_a,
        "b": ann_b,
        "outsider": outsider,
        "theirs": theirs,
    }


def _create(api_client, member, setup, per_item=2):
    operator = api_client(user=member(Role.OPERATOR))
    response = operator.post(
        "/api/v1/annotation/queues/",
        {
            "name": "support-helpfulness",
            "spec_id": setup["spec"].pk,
            "filters": {"task_id": "support"},
            "annotators_per_item": per_item,
            "assignee_ids": [setup["a"].pk, setup["b"].pk],
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    return operator, response.json()


def test_two_annotators_label_and_agreement_comes_out(api_client, member, tenant, setup):
    operator, queue = _create(api_client, member, setup)
    assert queue["item_count"] == 3
    assert AuditEvent.objects.filter(tenant=tenant, verb="annotation_queue.create").count() == 1
    values = {"a": [1, 1, 0], "b": [1, 0, 0]}
    for who in ("a", "b"):
        client = api_client(user=setup[who])
        seen = []
        for value in values[who]:
            item = client.get(f"/api/v1/annotation/queues/{queue['id']}/next/").json()
            assert item["item_id"] not in seen  # never shown twice to one annotator
            seen.append(item["item_id"])
            stored = client.post(
                f"/api/v1/annotation/items/{item['item_id']}/labels/", {"value": value}, format="json"
            )
            assert stored.status_code == 201, stored.content
        assert client.get(f"/api/v1/annotation/queues/{queue['id']}/next/").status_code == 204
        again = client.post(f"/api/v1/annotation/items/{seen[0]}/labels/", {"value": 1}, format="json")
        assert again.status_code == 409
    detail = operator.get(f"/api/v1/annotation/queues/{queue['id']}/").json()
    assert detail["progress"]["complete"] == 3
    assert detail["progress"]["labels"] == 6
    # pairs (1,1), (1,0), (0,0): p_o = 2/3, p_e = (2/3·1/3 + 1/3·2/3) = 4/9, κ = (2/3 − 4/9)/(5/9) = 0.4
    assert detail["agreement"]["level"] == "nominal"
    assert detail["agreement"]["cohen_kappa"] == pytest.approx(0.4)
    assert detail["agreement"]["krippendorff_alpha"] == pytest.approx(0.4444, abs=1e-4)
    assert [row["annotator"] for row in detail["annotators"]] == sorted(
        [setup["a"].username, setup["b"].username]
    )
    assert len(detail["disagreements"]) == 1
    rewards = Reward.objects.filter(tenant=tenant, source="annotator")
    assert rewards.count() == 6
    assert set(rewards.values_list("spec__name", flat=True)) == {"helpful"}
    export = operator.get(f"/api/v1/annotation/queues/{queue['id']}/labels/export/")
    rows = [json.loads(line) for line in b"".join(export.streaming_content).decode().splitlines()]
    assert len(rows) == 6
    assert {row["annotator"] for row in rows} == {setup["a"].username, setup["b"].username}

    item_id = detail["disagreements"][0]["item_id"]
    trajectory = AnnotationItem.objects.get(pk=item_id).trajectory
    assert (
        api_client(user=setup["a"])
        .post(f"/api/v1/annotation/items/{item_id}/resolve/", {"value": 0}, format="json")
        .status_code
        == 403
    )
    resolved = operator.post(
        f"/api/v1/annotation/items/{item_id}/resolve/",
        {"value": 1, "reason": "policy says yes"},
        format="json",
    )
    assert resolved.status_code == 200
    assert resolved.json()["resolved_value"] == 1.0
    assert training_reward(tenant=tenant, trajectory=trajectory) == 1.0
    assert operator.get(f"/api/v1/annotation/queues/{queue['id']}/").json()["disagreements"] == []


def test_not_assigned_is_403_and_nothing_stored(api_client, member, tenant, setup):
    _, queue = _create(api_client, member, setup, per_item=1)
    item = AnnotationItem.objects.filter(queue_id=queue["id"]).first()
    outsider = api_client(user=setup["outsider"])
    refused = outsider.post(
        f"/api/v1/annotation/items/{item.pk}/labels/", {"value": 1, "correction": "x"}, format="json"
    )
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "not_assigned"
    assert outsider.get(f"/api/v1/annotation/queues/{queue['id']}/next/").status_code == 403
    assert outsider.post(f"/api/v1/annotation/items/{item.pk}/skip/").status_code == 403
    assert not AnnotationLabel.objects.exists()
    assert not Reward.objects.filter(tenant=tenant).exists()
    viewer = api_client(user=member(Role.VIEWER))
    assert (
        viewer.post(f"/api/v1/annotation/items/{item.pk}/labels/", {"value": 1}, format="json").status_code
        == 403
    )
    assert (
        viewer.post(
            "/api/v1/annotation/queues/", {"name": "x", "spec_id": setup["spec"].pk}, format="json"
        ).status_code
        == 403
    )
    out_of_spec = api_client(user=setup["a"]).post(
        f"/api/v1/annotation/items/{item.pk}/labels/", {"value": 0.5}, format="json"
    )
    assert out_of_spec.status_code == 422
    assert "'helpful'" in out_of_spec.json()["error"]["message"]
    assert not AnnotationLabel.objects.exists()


def test_step_targets_corrections_and_skips(api_client, member, tenant, setup):
    _, queue = _create(api_client, member, setup, per_item=1)
    client = api_client(user=setup["a"])
    first = client.get(f"/api/v1/annotation/queues/{queue['id']}/next/").json()
    assert client.post(f"/api/v1/annotation/items/{first['item_id']}/skip/").status_code == 201
    second = client.get(f"/api/v1/annotation/queues/{queue['id']}/next/").json()
    assert second["item_id"] != first["item_id"]
    step = AnnotationItem.objects.get(pk=second["item_id"]).trajectory.steps.get(index=1)
    stored = client.post(
        f"/api/v1/annotation/items/{second['item_id']}/labels/",
        {"value": 0, "step_id": str(step.pk), "correction": "Should have asked for the order number."},
        format="json",
    )
    assert stored.status_code == 201
    assert stored.json()["target"] == "step"
    critique = Reward.objects.get(tenant=tenant, kind="critique")
    assert (critique.step_id, critique.source, critique.label) == (
        step.pk,
        "annotator",
        "Should have asked for the order number.",
    )
    # b still sees the item a skipped: skipping hides it only from a
    other = api_client(user=setup["b"]).get(f"/api/v1/annotation/queues/{queue['id']}/next/").json()
    assert other["item_id"] == first["item_id"]


def test_isolation(api_client, member, setup):
    operator, queue = _create(api_client, member, setup)
    listed = operator.get("/api/v1/annotation/queues/").json()["results"]
    assert [row["name"] for row in listed] == ["support-helpfulness"]
    theirs = setup["theirs"]
    their_item = AnnotationItem.objects.get(queue=theirs)
    assert operator.get(f"/api/v1/annotation/queues/{theirs.pk}/").status_code == 404
    assert operator.get(f"/api/v1/annotation/queues/{theirs.pk}/labels/export/").status_code == 404
    assert (
        operator.post(
            f"/api/v1/annotation/items/{their_item.pk}/resolve/", {"value": 1}, format="json"
        ).status_code
        == 404
    )
    assert (
        api_client(user=setup["a"])
        .post(f"/api/v1/annotation/items/{their_item.pk}/labels/", {"value": 1}, format="json")
        .status_code
        == 404
    )
    assert AnnotationQueue.objects.count() == 2
    assert not AnnotationLabel.objects.exists()


def test_workspace_page(client, member, tenant, setup):
    queue = annotation_queue_create(
        tenant=tenant,
        actor=SYSTEM,
        name="q",
        spec_id=setup["spec"].pk,
        filters={"task_id": "support"},
        annotators_per_item=1,
        assignee_ids=[setup["a"].pk],
    )
    client.force_login(setup["outsider"])
    assert client.get(f"/annotation/{queue.pk}/work/").status_code == 403
    client.force_login(setup["a"])
    page = client.get(f"/annotation/{queue.pk}/work/").content.decode()
    assert "lookup" in page
    assert 'name="option" value="1"' in page
    assert 'name="option" value="2"' in page
    item = AnnotationItem.objects.filter(queue=queue).order_by("id").first()
    client.post(f"/annotation/items/{item.pk}/label/", {"option": "2", "comment": "meh"})
    label = AnnotationLabel.objects.get(item=item)
    assert (label.value, label.comment, label.annotator) == (0.0, "meh", setup["a"])
    assert client.get(f"/annotation/{setup['theirs'].pk}/work/").status_code == 404
