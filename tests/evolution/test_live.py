"""The `evolution` stream over the live consumer: a viewer's page receives a decision as it is recorded (the
timeline's payload); an annotator, who may not view evolution, cannot subscribe."""

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from apps.audit.services import Actor
from apps.evolution.decisions import decision_record
from apps.tenants.permissions import Role
from areal_web.asgi import application
from tests.evolution.factories import EvolutionPolicyFactory
from tests.metrics.test_live_consumer import _headers
from tests.tenants.factories import MembershipFactory

pytestmark = pytest.mark.django_db(transaction=True)


async def _socket(tenant, role):
    user = await sync_to_async(lambda: MembershipFactory(tenant=tenant, role=role).user)()
    socket = WebsocketCommunicator(application, "/ws/live/acme/", headers=await sync_to_async(_headers)(user))
    assert (await socket.connect())[0]
    await socket.send_json_to({"subscribe": "evolution"})
    return socket, await socket.receive_json_from(timeout=5)


async def test_a_recorded_decision_reaches_a_viewer_and_not_an_annotator(tenant):
    viewer, answer = await _socket(tenant, Role.VIEWER)
    assert answer == {"subscribed": "evolution"}
    annotator, refused = await _socket(tenant, Role.ANNOTATOR)
    assert "error" in refused
    policy = await sync_to_async(EvolutionPolicyFactory)(tenant=tenant, mode="propose")

    decision = await sync_to_async(decision_record)(
        tenant=tenant,
        policy=policy,
        kind="train",
        reason="correction_rate 0.31 > 0.2",
        evidence={"signals": [{"name": "correction_rate", "value": 0.31, "op": ">", "threshold": 0.2}]},
        actor=Actor.system("test"),
    )

    event = await viewer.receive_json_from(timeout=5)
    assert event["stream"] == "evolution"
    assert event["payload"]["type"] == "decision"
    assert event["payload"]["id"] == decision.pk
    assert event["payload"]["status"] == "proposed"
    assert event["payload"]["policy"] == policy.pk
    assert await annotator.receive_nothing(timeout=0.3)
    await viewer.disconnect()
    await annotator.disconnect()
