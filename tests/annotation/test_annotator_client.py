"""The demo's simulated annotator works a queue through the real HTTP API as a person: it signs in with the
console's form (session cookie, CSRF token), labels what it knows the outcome of and skips the rest."""

import pytest

from apps.annotation.models import AnnotationLabel, AnnotationSkip
from apps.annotation.services import annotation_queue_create
from apps.rewards.models import Reward
from apps.tenants.permissions import Role
from tests.rewards.factories import SYSTEM, make_spec
from tests.tenants.factories import PASSWORD
from tests.trajectories.factories import TrajectoryFactory
from workers.envs.annotator import AnnotatorClient
from workers.envs.users import SimulatedAnnotator
from workers.envs.weather import Outcome

pytestmark = pytest.mark.django_db(transaction=True)


def test_annotator_signs_in_labels_known_outcomes_and_skips_unknown(live_server, member, tenant):
    import httpx

    spec = make_spec(tenant, name="quality", kind="numeric", minimum=0, maximum=1)
    succeeded = TrajectoryFactory(tenant=tenant, session_id="rl-ok", task_id="weather")
    wrong = TrajectoryFactory(tenant=tenant, session_id="rl-wrong", task_id="weather")
    unknown = TrajectoryFactory(tenant=tenant, session_id="rl-unknown", task_id="weather")
    person = member(Role.ANNOTATOR)
    queue = annotation_queue_create(
        tenant=tenant,
        actor=SYSTEM,
        name="live",
        spec_id=spec.pk,
        filters={"task_id": "weather"},
        annotators_per_item=1,
        assignee_ids=[person.pk],
    )
    outcomes = {
        "rl-ok": Outcome(called_tool=True, right_city=True, answered=True, right_temperature=True, reason=""),
        "rl-wrong": Outcome(
            called_tool=True,
            right_city=True,
            answered=True,
            right_temperature=False,
            reason="wrong temperature",
        ),
    }
    client = AnnotatorClient(
        console_url=live_server.url,
        username=person.username,
        password=PASSWORD,
        queue_id=queue.pk,
        outcomes=outcomes,
        annotator=SimulatedAnnotator(share=1.0, noise=0.0),
    )
    with httpx.Client(base_url=live_server.url, timeout=30) as http:
        client.sign_in(http)
        while client.work_once(http):
            pass
    labels = {
        label.item.trajectory_id: label.value for label in AnnotationLabel.objects.filter(annotator=person)
    }
    assert labels == {succeeded.pk: 1.0, wrong.pk: 0.5}
    assert list(
        AnnotationSkip.objects.filter(annotator=person).values_list("item__trajectory_id", flat=True)
    ) == [unknown.pk]
    assert Reward.objects.filter(tenant=tenant, source="annotator", spec=spec).count() == 2
    assert (client.stats.labelled, client.stats.skipped) == (2, 1)


def test_wrong_password_is_refused(live_server, member, tenant):
    import httpx

    person = member(Role.ANNOTATOR)
    client = AnnotatorClient(
        console_url=live_server.url,
        username=person.username,
        password="not-it",
        queue_id=1,
        outcomes={},
        annotator=SimulatedAnnotator(),
    )
    with httpx.Client(base_url=live_server.url, timeout=30) as http, pytest.raises(PermissionError):
        client.sign_in(http)
