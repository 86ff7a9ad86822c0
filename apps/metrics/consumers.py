import asyncio
import contextlib
import logging
import re

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from apps.metrics.publish import STREAM_NAME, stream_group
from apps.tenants.permissions import Action, role_can
from apps.tenants.selectors import membership_role_of_active_user

logger = logging.getLogger(__name__)
TENANT_SLUG = re.compile(r"^[-a-zA-Z0-9_]{1,64}$")

# Each stream a page may subscribe to, and the action whose role may view its data (the page's action).
# A stream not listed here cannot be subscribed to.
STREAM_ACTIONS: tuple[tuple[re.Pattern, Action], ...] = (
    (re.compile(r"^gateway\.traffic$"), Action.TENANT_VIEW),
    (re.compile(r"^overview\.outcomes$"), Action.REWARD_VIEW),
    (re.compile(r"^training\.(jobs|job-\d+|online-\d+)$"), Action.TRAINING_VIEW),
    (re.compile(r"^release-\d+$"), Action.RELEASE_VIEW),
    (re.compile(r"^evaluation$"), Action.EVAL_VIEW),
    (re.compile(r"^backends$"), Action.BACKEND_VIEW),
    (re.compile(r"^evolution$"), Action.EVOLUTION_VIEW),
)


def stream_action(stream: str) -> Action | None:
    return next((action for pattern, action in STREAM_ACTIONS if pattern.match(stream)), None)


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """Streams live events to a console page at /ws/live/<tenant slug>/.

    Anonymous connections are closed (4401); a user who is not a member of the tenant is closed with
    4404, exactly like a missing tenant. The client sends {"subscribe": "<stream>"} to join the
    tenant's stream group: the stream must be one of STREAM_ACTIONS and the member's role (read afresh)
    must allow its action. Every AREAL_LIVE_RECHECK_SECONDS the membership is read again: a member removed
    from the tenant (or a user deactivated or signed out) is closed with 4404 (4401 signed out), and a
    stream the member's new role may no longer view is left ({"unsubscribed": stream}), and the remaining
    groups are joined again (a restarted Redis forgets them). The consumer only forwards what
    `metrics_publish` sends.
    """

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        slug = self.scope["url_route"]["kwargs"]["tenant_slug"]
        membership = await self._membership(user, slug=slug) if TENANT_SLUG.match(slug) else None
        if membership is None:
            await self.close(code=4404)
            return
        self.tenant_id, self.role = membership
        self.groups_joined: dict[str, str] = {}  # stream → group
        await self.accept()
        self.recheck = asyncio.get_running_loop().create_task(self._recheck_forever())

    @database_sync_to_async
    def _membership(self, user, *, slug=None):
        """(tenant id, role) of the user's membership, or None (also for an inactive user)."""
        if slug is not None:
            return membership_role_of_active_user(user_id=user.pk, tenant_slug=slug)
        return membership_role_of_active_user(user_id=user.pk, tenant_id=self.tenant_id)

    @database_sync_to_async
    def _signed_in(self) -> bool:
        session = self.scope.get("session")
        return session is None or session.session_key is None or session.exists(session.session_key)

    async def _still_allowed(self) -> bool:
        """Reads the membership again; closes the socket and returns False when it is gone."""
        if not await self._signed_in():
            await self.close(code=4401)
            return False
        membership = await self._membership(self.scope["user"])
        if membership is None:
            await self.close(code=4404)
            return False
        self.role = membership[1]
        return True

    async def _recheck_forever(self):
        while True:
            await asyncio.sleep(float(settings.AREAL_LIVE_RECHECK_SECONDS))
            try:
                allowed = await self._still_allowed()
            except Exception:  # cannot tell (database down): fail closed; the page reconnects
                logger.exception("live stream: membership re-check failed")
                await self.close(code=1011)
                allowed = False
            if not allowed:
                await self._leave_all()
                return
            for stream in list(self.groups_joined):
                if not role_can(self.role, stream_action(stream)):
                    await self.channel_layer.group_discard(self.groups_joined.pop(stream), self.channel_name)
                    await self.send_json(
                        {"unsubscribed": stream, "error": "your role may no longer view this stream"}
                    )
            await self._rejoin()

    async def _rejoin(self):
        """Joins the socket's groups again: a Redis restart (which keeps nothing here) forgets every group
        membership while the socket stays open, and the page would go silent without a word. group_add is
        idempotent and refreshes the membership's expiry."""
        for group in list(self.groups_joined.values()):
            try:
                await self.channel_layer.group_add(group, self.channel_name)
            except Exception:  # the layer is still down: the next re-check tries again
                logger.warning("live stream: re-joining %s failed", group, exc_info=True)

    async def receive_json(self, content, **kwargs):
        stream = content.get("subscribe") if isinstance(content, dict) else None
        if not isinstance(stream, str) or not STREAM_NAME.match(stream):
            await self.send_json({"error": 'send {"subscribe": "<stream>"} with a-z, 0-9, _ . - only'})
            return
        action = stream_action(stream)
        if action is None:
            await self.send_json({"error": f"there is no stream {stream!r}"})
            return
        if not await self._still_allowed():
            await self._leave_all()
            return
        if not role_can(self.role, action):
            await self.send_json({"error": f"your role may not view the stream {stream!r}"})
            return
        group = stream_group(tenant_id=self.tenant_id, stream=stream)
        await self.channel_layer.group_add(group, self.channel_name)
        self.groups_joined[stream] = group
        await self.send_json({"subscribed": stream})

    async def _leave_all(self):
        for group in getattr(self, "groups_joined", {}).values():
            await self.channel_layer.group_discard(group, self.channel_name)
        self.groups_joined = {}

    async def disconnect(self, code):
        recheck = getattr(self, "recheck", None)
        if recheck is not None and recheck is not asyncio.current_task():
            recheck.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await recheck
        await self._leave_all()

    async def stream_event(self, event):
        if event["stream"] in self.groups_joined:
            await self.send_json({"stream": event["stream"], "payload": event["payload"]})
