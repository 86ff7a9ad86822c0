"""The project's URLs plus views and a middleware that fail, for tests/console/test_error_page.py."""

from django.urls import path

from areal_web import urls as project_urls

MARKER = "failure-marker-4f2a"


def failing_view(request):
    raise RuntimeError(f"a view failed ({MARKER})")


class FailingMiddleware:
    """Fails outside any view, on /middleware-fails/ only."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path == "/middleware-fails/":
            raise RuntimeError(f"a middleware failed ({MARKER})")
        return self.get_response(request)


urlpatterns = [
    path("fails/", failing_view),
    path("api/v1/fails/", failing_view),
    *project_urls.urlpatterns,
]
handler404 = project_urls.handler404
handler500 = project_urls.handler500
