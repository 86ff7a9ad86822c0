from django.urls import path

from apps.metrics.consumers import LiveConsumer

websocket_urlpatterns = [path("ws/live/<str:tenant_slug>/", LiveConsumer.as_asgi())]
