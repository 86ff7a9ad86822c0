"""ASGI entry point.

Outermost, the gateway takes its paths (/v1, /rl, /s/<session>/v1, and AReaL's root endpoints:
/chat/completions, /responses, /messages, ...; apps.gateway.asgi_app.is_gateway_path) and the lifespan
events (its journal flusher); everything else goes to Channels' router: HTTP to Django behind the
request-body cap (areal_web/middleware.py), /ws/ WebSockets to consumers with session authentication.
The gateway's paths never pass through Django's middleware, so `gateway_edge` gives them Django's Host
check (ALLOWED_HOSTS) and security headers.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "areal_web.settings.local")
django_application = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from apps.gateway.asgi_app import is_gateway_path, with_gateway  # noqa: E402
from areal_web.middleware import body_limit, gateway_edge  # noqa: E402
from areal_web.routing import websocket_urlpatterns  # noqa: E402

_gateway_and_django = with_gateway(
    ProtocolTypeRouter(
        {
            "http": body_limit(django_application),
            "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        }
    )
)
application = gateway_edge(_gateway_and_django, is_gateway_path=is_gateway_path)
application.gateway = _gateway_and_django.gateway
