"""An annotator labels three trajectories in a real headless Chromium with the keyboard alone."""

import pytest

from apps.annotation.models import AnnotationLabel
from apps.annotation.services import annotation_queue_create
from apps.rewards.models import Reward
from apps.tenants.permissions import Role
from tests.browser_support import browser, page  # noqa: F401  (fixtures)
from tests.rewards.factories import SYSTEM, make_spec
from tests.tenants.factories import PASSWORD
from tests.trajectories.factories import TrajectoryFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_annotator_labels_three_trajectories_with_the_keyboard(live_server, page, member, tenant):  # noqa: F811
    spec = make_spec(tenant, name="stars", kind="numeric", minimum=1, maximum=5)
    trajectories = [
        TrajectoryFactory(tenant=tenant, task_id="support", text=f"conversation {number}")
        for number in range(3)
    ]
    annotator = member(Role.ANNOTATOR)
    queue = annotation_queue_create(
        tenant=tenant,
        actor=SYSTEM,
        name="support",
        spec_id=spec.pk,
        filters={"task_id": "support"},
        annotators_per_item=1,
        assignee_ids=[annotator.pk],
    )
    page.goto(f"{live_server.url}/login/?next=/annotation/{queue.pk}/work/")
    page.fill("#id_username", annotator.username)
    page.fill("#id_password", PASSWORD)
    page.keyboard.press("Enter")
    page.wait_for_selector("#label-form")
    page.wait_for_load_state(
        "load"
    )  # the keys work once annotation.js has run; a busy run pressed them before
    assert "You labelled 0" in page.locator("#progress").inner_text()

    # 1: four stars on the whole trajectory.
    page.keyboard.press("4")
    page.keyboard.press("s")
    page.wait_for_selector("text=Label saved.")
    page.wait_for_load_state("load")
    assert "You labelled 1" in page.locator("#progress").inner_text()

    # 2: move to the second step (j j), two stars, a comment and a correction, submit.
    page.keyboard.press("j")
    page.keyboard.press("j")
    assert page.locator("#target-name").inner_text() == "step #1"
    page.keyboard.press("2")
    page.keyboard.press("c")
    page.keyboard.type("too terse")
    page.keyboard.press("Escape")
    page.keyboard.press("e")
    page.keyboard.type("Give the tracking link.")
    page.keyboard.press("Escape")
    page.keyboard.press("s")
    page.wait_for_selector("text=You labelled 2")
    page.wait_for_load_state("load")
    page.shoot("second-labelled")

    # 3: j then k returns to the trajectory; five stars.
    page.keyboard.press("j")
    page.keyboard.press("k")
    page.keyboard.press("5")
    page.keyboard.press("s")
    page.wait_for_selector("#queue-done")
    page.shoot("done")

    labels = list(AnnotationLabel.objects.filter(annotator=annotator).order_by("created_at"))
    assert [label.value for label in labels] == [4.0, 2.0, 5.0]
    assert [label.target for label in labels] == ["trajectory", "step", "trajectory"]
    assert labels[1].comment == "too terse"
    assert labels[1].correction == "Give the tracking link."
    assert {label.item.trajectory_id for label in labels} == {trajectory.pk for trajectory in trajectories}
    assert Reward.objects.filter(tenant=tenant, source="annotator", kind="critique").count() == 1
    assert page.javascript_errors == []
