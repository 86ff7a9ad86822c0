"""The live consumer over the real channel layer (Redis on CI, in-memory embedded), through the
full ASGI stack with a real session cookie."""

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from apps.audit.services import Actor
from apps.metrics.publish import metrics_publish
from apps.tenants.models import Membership
from apps.tenants.permissions import Role
from apps.tenants.services import membership_change_role, membership_remove
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
    await socket.send_json_to({"subscribe": "gateway.traffic"})
    assert await socket.receive_json_from(timeout=5) == {"subscribed": "gateway.traffic"}
    await sync_to_async(metrics_publish)(
        tenant_id=other_tenant.pk, stream="gateway.traffic", payload={"n": -1}
    )
    await sync_to_async(metrics_publish)(tenant_id=tenant.pk, stream="evaluation", payload={"n": -2})
    await sync_to_async(metrics_publish)(tenant_id=tenant.pk, stream="gateway.traffic", payload={"n": 1})
    assert await socket.receive_json_from(timeout=5) == {"stream": "gateway.traffic", "payload": {"n": 1}}
    assert await socket.receive_nothing(timeout=0.3)
    await socket.disconnect()


async def test_anonymous_connection_is_closed():
    socket = WebsocketCommunicator(application, "/ws/live/acme/", headers=_headers())
    connected, code = await socket.connect()
    assert not connected
    assert code == 4401


async def test_non_member_is_closed_like_a_missing_tenant(viewer_headers, other_tenant):
    socket = WebsocketCommunicator(application, "/ws/live/globex/", headers=viewer_headers)
    connected, code = await socket.connect()
    assert not connected
    assert code == 4404
    missing = WebsocketCommunicator(application, "/ws/live/nowhere/", headers=viewer_headers)
    assert (await missing.connect()) == (False, 4404)


async def test_bad_subscription_is_answered_not_joined(viewer_headers, tenant):
    socket = WebsocketCommunicator(application, "/ws/live/acme/", headers=viewer_headers)
    await socket.connect()
    await socket.send_json_to({"subscribe": "../../etc"})
    assert "error" in await socket.receive_json_from(timeout=5)
    await socket.disconnect()


async def _connected(user, slug="acme"):
    socket = WebsocketCommunicator(
        application, f"/ws/live/{slug}/", headers=await sync_to_async(_headers)(user)
    )
    assert (await socket.connect())[0]
    return socket


async def _member(tenant, role):
    return await sync_to_async(lambda: MembershipFactory(tenant=tenant, role=role).user)()


async def test_unknown_streams_are_refused(tenant):
    socket = await _connected(await _member(tenant, Role.ADMIN))
    await socket.send_json_to({"subscribe": "anything.else"})
    answer = await socket.receive_json_from(timeout=5)
    assert "error" in answer
    assert "subscribed" not in answer
    await socket.disconnect()


async def test_a_stream_needs_the_role_that_may_view_its_data(tenant):
    """Backend states (and their probe errors) are for the roles that may view backends: not annotators."""
    annotator = await _connected(await _member(tenant, Role.ANNOTATOR))
    await annotator.send_json_to({"subscribe": "backends"})
    answer = await annotator.receive_json_from(timeout=5)
    assert "error" in answer
    assert "subscribed" not in answer
    operator = await _connected(await _member(tenant, Role.OPERATOR))
    await operator.send_json_to({"subscribe": "backends"})
    assert await operator.receive_json_from(timeout=5) == {"subscribed": "backends"}

    await sync_to_async(metrics_publish)(tenant_id=tenant.pk, stream="backends", payload={"state": "down"})
    assert await operator.receive_json_from(timeout=5) == {"stream": "backends", "payload": {"state": "down"}}
    assert await annotator.receive_nothing(timeout=0.3)
    await annotator.disconnect()
    await operator.disconnect()


async def test_a_member_removed_from_the_tenant_is_disconnected(tenant, settings):
    settings.AREAL_LIVE_RECHECK_SECONDS = 0.2
    viewer = await _member(tenant, Role.VIEWER)
    socket = await _connected(viewer)
    await socket.send_json_to({"subscribe": "gateway.traffic"})
    assert await socket.receive_json_from(timeout=5) == {"subscribed": "gateway.traffic"}

    membership = await sync_to_async(Membership.objects.get)(user=viewer, tenant=tenant)
    await sync_to_async(membership_remove)(
        tenant=tenant, actor=Actor.system("test"), membership_id=membership.pk
    )

    assert await socket.receive_output(timeout=5) == {"type": "websocket.close", "code": 4404}
    await socket.wait()


async def test_a_demoted_member_loses_the_streams_of_the_old_role(tenant, settings):
    settings.AREAL_LIVE_RECHECK_SECONDS = 0.2
    operator = await _member(tenant, Role.OPERATOR)
    socket = await _connected(operator)
    for stream in ("backends", "gateway.traffic"):
        await socket.send_json_to({"subscribe": stream})
        assert await socket.receive_json_from(timeout=5) == {"subscribed": stream}

    membership = await sync_to_async(Membership.objects.get)(user=operator, tenant=tenant)
    await sync_to_async(membership_change_role)(
        tenant=tenant, actor=Actor.system("test"), membership_id=membership.pk, role=Role.ANNOTATOR
    )
    notice = await socket.receive_json_from(timeout=5)
    assert notice.get("unsubscribed") == "backends"

    await sync_to_async(metrics_publish)(tenant_id=tenant.pk, stream="backends", payload={"state": "down"})
    await sync_to_async(metrics_publish)(tenant_id=tenant.pk, stream="gateway.traffic", payload={"n": 1})
    assert await socket.receive_json_from(timeout=5) == {"stream": "gateway.traffic", "payload": {"n": 1}}
    assert await socket.receive_nothing(timeout=0.3)
    await socket.disconnect()


async def test_a_channel_layer_that_forgot_its_groups_is_rejoined_within_the_recheck(
    viewer_headers, tenant, settings
):
    """bench/reliability/faults.py (redis) saw a page go silent after a Redis restart: the socket stayed open
    but its group membership was gone. The memberships are dropped here as the restart drops them."""
    settings.AREAL_LIVE_RECHECK_SECONDS = 0.2
    socket = WebsocketCommunicator(application, "/ws/live/acme/", headers=viewer_headers)
    assert (await socket.connect())[0]
    await socket.send_json_to({"subscribe": "gateway.traffic"})
    assert await socket.receive_json_from(timeout=5) == {"subscribed": "gateway.traffic"}
    await sync_to_async(_forget_every_group)()
    await sync_to_async(metrics_publish)(tenant_id=tenant.pk, stream="gateway.traffic", payload={"n": 1})
    assert await socket.receive_nothing(timeout=0.1)  # forgotten: this point is lost
    await socket.receive_nothing(timeout=0.5)  # a re-check passes
    await sync_to_async(metrics_publish)(tenant_id=tenant.pk, stream="gateway.traffic", payload={"n": 2})
    assert await socket.receive_json_from(timeout=5) == {"stream": "gateway.traffic", "payload": {"n": 2}}
    await socket.disconnect()


def _forget_every_group():
    """What a restarted Redis (nothing kept on disk) does to this layer's group memberships."""
    from channels.layers import get_channel_layer
    from django.conf import settings as django_settings

    layer = get_channel_layer()
    if isinstance(getattr(layer, "groups", None), dict):  # the in-memory layer
        layer.groups.clear()
        return
    import redis

    client = redis.Redis.from_url(django_settings.REDIS_URL)
    keys = list(client.scan_iter(match=f"{layer.prefix}:group:*"))
    assert keys, "the subscription's group should be in Redis"
    client.delete(*keys)
