import re

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from apps.metrics.publish import STREAM_NAME, stream_group
from apps.tenants.models import Membership

TENANT_SLUG = re.compile(r"^[-a-zA-Z0-9_]{1,64}$")


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """Streams live events to a console page at /ws/live/<tenant slug>/.

    Anonymous connections are closed (4401); a user who is not a member of the tenant is closed with
    4404, exactly like a missing tenant. The client sends {"subscribe": "<stream>"} to join the
    tenant's stream group; the consumer only forwards what `metrics_publish` sends.
    """

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        slug = self.scope["url_route"]["kwargs"]["tenant_slug"]
        self.tenant_id = await self._tenant_id_for(user, slug) if TENANT_SLUG.match(slug) else None
        if self.tenant_id is None:
            await self.close(code=4404)
            return
        self.groups_joined = set()
        await self.accept()

    @database_sync_to_async
    def _tenant_id_for(self, user, slug):
        return Membership.objects.filter(user=user, tenant__slug=slug).values_list("tenant_id", flat=True).first()

    async def receive_json(self, content, **kwargs):
        stream = content.get("subscribe") if isinstance(content, dict) else None
        if not isinstance(stream, str) or not STREAM_NAME.match(stream):
            await self.send_json({"error": "send {\"subscribe\": \"<stream>\"} with a-z, 0-9, _ . - only"})
            return
        group = stream_group(tenant_id=self.tenant_id, stream=stream)
        await self.channel_layer.group_add(group, self.channel_name)
        self.groups_joined.add(group)
        await self.send_json({"subscribed": stream})

    async def disconnect(self, code):
        for group in getattr(self, "groups_joined", ()):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def stream_event(self, event):
        await self.send_json({"stream": event["stream"], "payload": event["payload"]})
