"""The annotator's pages (issue 29): the answer to judge beside the rating, each option's meaning and the keys
on the page, repeated conversation folded; Previous changes the last label (a replacing reward, audited) or
takes a skip back; queues sample; the queue page lists its items and says why an agreement figure is blank;
an annotator's navigation holds only their queues."""

import re

import pytest
from django.test import Client

from apps.annotation.models import AnnotationItem, AnnotationLabel, AnnotationSkip
from apps.annotation.services import (
    annotation_label_submit,
    annotation_queue_create,
    annotation_queue_fill,
    annotation_skip,
)
from apps.annotation.views import folded_steps
from apps.audit.models import AuditEvent
from apps.audit.services import Actor
from apps.rewards.models import Reward
from apps.tenants.permissions import Role
from tests.rewards.factories import SYSTEM, make_spec
from tests.trajectories.factories import TrajectoryFactory

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def annotator(member):
    return member(Role.ANNOTATOR)


@pytest.fixture
def queue(tenant, annotator):
    spec = make_spec(tenant, name="helpful", kind="boolean", description="The answer solves the user's task.")
    for number in range(3):
        TrajectoryFactory(tenant=tenant, task_id="support", text=f"reply {number}", steps=2)
    return annotation_queue_create(
        tenant=tenant,
        actor=SYSTEM,
        name="support",
        spec_id=spec.pk,
        filters={"task_id": "support"},
        annotators_per_item=1,
        assignee_ids=[annotator.pk],
    )


def test_the_workspace_shows_the_answer_beside_the_rating_with_meanings_and_keys(annotator, queue):
    page = _client(annotator).get(f"/annotation/{queue.pk}/work/").content.decode()
    answer = page.split('id="answer-to-judge"')[1].split("</div>\n      </div>")[0]
    assert re.search(r"<pre>reply \d 1</pre>", answer)  # the last step's answer (step 1; step 0 is above)
    rating = page.split('class="workspace-rating"')[1]
    assert "The answer solves the user&#x27;s task." in rating
    assert "it meets the spec · records 1" in rating
    assert "it does not meet the spec · records 0" in rating
    assert 'id="shortcuts"' in rating
    assert "previous item" in rating


def test_repeated_conversation_is_folded():
    first = {"observation": {"messages": [{"role": "user", "content": "weather in Oslo?"}]}}
    first["action"] = {"message": {"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]}}
    second = {
        "observation": {
            "messages": [
                {"role": "user", "content": "weather in Oslo?"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]},
                {"role": "tool", "content": "snow, -3"},
            ]
        },
        "action": {"message": {"role": "assistant", "content": "Snow."}},
    }
    folded = folded_steps([first, second])
    assert [step["folded"] for step in folded] == [0, 2]
    assert folded[1]["new_messages"] == [{"role": "tool", "content": "snow, -3"}]


def test_previous_changes_the_last_label_with_a_replacing_reward(tenant, annotator, queue):
    client = _client(annotator)
    item = AnnotationItem.objects.filter(queue=queue).order_by("id").first()
    label = annotation_label_submit(
        tenant=tenant, actor=Actor.user(annotator), user=annotator, item_id=item.pk, value=1.0
    )
    page = client.get(f"/annotation/{queue.pk}/previous/").content.decode()
    assert "You gave <strong>1</strong>" in page
    response = client.post(f"/annotation/{queue.pk}/previous/", {"option": "2"})  # "no"
    assert response.status_code == 302
    label.refresh_from_db()
    assert label.value == 0.0
    rewards = Reward.objects.filter(tenant=tenant, trajectory=item.trajectory, source="annotator")
    assert sorted(reward.value for reward in rewards) == [0.0, 1.0]  # appended, never edited
    assert rewards.get(value=0.0).reason.startswith("replaces reward")
    assert AuditEvent.objects.filter(tenant=tenant, verb="annotation_label.revise").count() == 1


def test_previous_takes_a_skip_back(tenant, annotator, queue):
    client = _client(annotator)
    item = AnnotationItem.objects.filter(queue=queue).order_by("id").first()
    annotation_skip(tenant=tenant, user=annotator, item_id=item.pk)
    page = client.get(f"/annotation/{queue.pk}/work/").content.decode()
    assert f'data-item="{item.pk}"' not in page
    assert client.post(f"/annotation/{queue.pk}/previous/").status_code == 302
    assert not AnnotationSkip.objects.filter(item=item).exists()
    assert f'data-item="{item.pk}"' in client.get(f"/annotation/{queue.pk}/work/").content.decode()
    assert AuditEvent.objects.filter(tenant=tenant, verb="annotation_skip.undo").count() == 1


def test_another_persons_label_is_not_theirs_to_change(tenant, member, annotator, queue):
    other = member(Role.ANNOTATOR)
    queue.assignees.add(other)
    item = AnnotationItem.objects.filter(queue=queue).order_by("id").first()
    annotation_label_submit(
        tenant=tenant, actor=Actor.user(annotator), user=annotator, item_id=item.pk, value=1.0
    )
    _client(other).post(f"/annotation/{queue.pk}/previous/", {"option": "2"})
    assert AnnotationLabel.objects.get(item=item).value == 1.0


def test_a_queue_samples_the_backlog(tenant, annotator):
    spec = make_spec(tenant, name="sampled", kind="boolean")
    for number in range(6):
        TrajectoryFactory(tenant=tenant, task_id="backlog", text=f"b{number}", steps=1)
    queue = annotation_queue_create(
        tenant=tenant,
        actor=SYSTEM,
        name="sample",
        spec_id=spec.pk,
        filters={"task_id": "backlog"},
        annotators_per_item=1,
        assignee_ids=[annotator.pk],
        sample_size=2,
    )
    assert AnnotationItem.objects.filter(queue=queue).count() == 2
    assert annotation_queue_fill(queue=queue) == 2  # a refill keeps the sample's size


def test_the_queue_page_lists_items_and_says_why_agreement_is_blank(member, tenant, queue):
    page = _client(member(Role.OPERATOR)).get(f"/annotation/{queue.pk}/").content.decode()
    items = page.split('id="items"')[1].split("</table>")[0]
    assert items.count("<tr data-item=") == 3
    assert "0 of 1" in items
    assert "Blank: needs two labels on the same item" in page
    assert "Blank: needs exactly two annotators (this queue has 0)" in page


def test_an_annotators_navigation_holds_only_their_queues(annotator, member, queue):
    page = _client(annotator).get("/annotation/").content.decode()
    navigation = page.split('id="main-nav"')[1].split("</nav>")[0]
    assert navigation.count("<a ") == 1
    assert 'href="/annotation/"' in navigation
    operator_navigation = _client(member(Role.OPERATOR)).get("/annotation/").content.decode()
    assert operator_navigation.split('id="main-nav"')[1].split("</nav>")[0].count("<a ") > 5
