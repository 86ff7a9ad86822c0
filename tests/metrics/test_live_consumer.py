"""The live consumer over the real channel layer (Redis on CI, in-memory embedded), through the
full ASGI stack with a real session cookie."""

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from apps.metrics.publish import metrics_publish
from apps.tenants.permissions import Role
from areal_web.asgi import application
from tests.tenants.factories import MembershipFactory

pytestmark = pytest.mark.django_db(transaction=True)


def _headers(user=None):
    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost")]
    if user is not None:
        client = Client()
        client.force_login(user)
        headers.append((b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()))
    return headers


@pytest.fixture
def viewer_headers(tenant):
    return _headers(MembershipFactory(tenant=tenant, role=Role.VIEWER).user)


async def test_member_receives_published_events_of_their_tenant_only(viewer_headers, tenant, other_tenant):
    socket = WebsocketCommunicator(application, "/ws/live/acme/", headers=viewer_headers)
    connected, _ = await socket.connect()
    assert connected
    await socket.send_json_to({"subscribe": "traffic"})
    assert await socket.receive_json_from(timeout=5) == {"subscribed": "traffic"}
    await sync_to_async(metrics_publish)(tenant_id=other_tenant.pk, stream="traffic", payload={"n": -1})
    await sync_to_async(metrics_publish)(tenant_id=tenant.pk, stream="other", payload={"n": -2})
    await sync_to_async(metrics_publish)(tenant_id=tenant.pk, stream="traffic", payload={"n": 1})
    assert await socket.receive_json_from(timeout=5) == {"stream": "traffic", "payload": {"n": 1}}
    assert await socket.receive_nothing(timeout=0.3)
    await socket.disconnect()


async def test_anonymous_connection_is_closed():
    socket = WebsocketCommunicator(application, "/ws/live/acme/", headers=_headers())
    connected, code = await socket.connect()
    assert not connected and code == 4401


async def test_non_member_is_closed_like_a_missing_tenant(viewer_headers, other_tenant):
    socket = WebsocketCommunicator(application, "/ws/live/globex/", headers=viewer_headers)
    connected, code = await socket.connect()
    assert not connected and code == 4404
    missing = WebsocketCommunicator(application, "/ws/live/nowhere/", headers=viewer_headers)
    assert (await missing.connect()) == (False, 4404)


async def test_bad_subscription_is_answered_not_joined(viewer_headers, tenant):
    socket = WebsocketCommunicator(application, "/ws/live/acme/", headers=viewer_headers)
    await socket.connect()
    await socket.send_json_to({"subscribe": "../../etc"})
    assert "error" in await socket.receive_json_from(timeout=5)
    await socket.disconnect()
