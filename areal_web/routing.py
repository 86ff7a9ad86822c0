from apps.metrics.routing import websocket_urlpatterns as metrics_patterns

websocket_urlpatterns = [*metrics_patterns]
