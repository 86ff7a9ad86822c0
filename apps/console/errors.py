"""The plain server error page under the embedded default's DEBUG (areal_web/settings/local.py).

The embedded default runs with DEBUG on (static files, host defaults), and under DEBUG Django answers a server
error with its debug page: the traceback, the installation's paths and its settings, to whoever made the request,
every signed-in member included. `PlainServerErrors` (local settings only; production and test run with DEBUG
off, where the same handler answers already) gives everyone the installation's own 500 instead
(`handler500`: templates/500.html, the API's JSON error under /api/), unless the operator asked for the debug
page by setting `DJANGO_DEBUG` (settings `AREAL_DEBUG_ERROR_PAGE`). The error is still logged and signalled as
Django does it.

Two ways in, because Django answers an error in two places: an exception of a view (or of its template's
render) reaches `process_exception`, which answers with `handler500`; an exception anywhere else (another
middleware) reaches Django's debug response, which reads the request's `exception_reporter_class`:
`PlainErrorReporter` writes the plain page there.
"""

from django.conf import settings
from django.core import signals
from django.core.exceptions import BadRequest, PermissionDenied, SuspiciousOperation
from django.http import Http404
from django.http.multipartparser import MultiPartParserError
from django.template import loader
from django.urls import get_resolver, get_urlconf
from django.utils.log import log_response
from django.views.debug import ExceptionReporter

PLAIN_PAGE = "<!doctype html><title>Server error</title><h1>Server Error (500)</h1>"

# Django answers these itself (400, 403, 404), not with its 500 debug page.
_ANSWERED_BY_DJANGO = (Http404, PermissionDenied, BadRequest, SuspiciousOperation, MultiPartParserError)


def debug_page_asked_for() -> bool:
    """Whether a server error may show Django's debug page: DEBUG on and the operator's explicit request."""
    return settings.DEBUG and getattr(settings, "AREAL_DEBUG_ERROR_PAGE", False)


class PlainErrorReporter(ExceptionReporter):
    """Django's debug response, written as the plain 500 page: no traceback, no paths, no settings."""

    def get_traceback_html(self):
        try:
            return loader.get_template("500.html").render()
        except Exception:  # noqa: BLE001  (a broken template must not bring the traceback back)
            return PLAIN_PAGE

    def get_traceback_text(self):
        return "Server Error (500)"


class PlainServerErrors:
    """Middleware: the installation's 500 for a server error, even under DEBUG, unless debug_page_asked_for."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if not debug_page_asked_for():
            request.exception_reporter_class = PlainErrorReporter
        return self.get_response(request)

    def process_exception(self, request, exception):
        if (
            debug_page_asked_for()
            or settings.DEBUG_PROPAGATE_EXCEPTIONS
            or isinstance(exception, _ANSWERED_BY_DJANGO)
        ):
            return None  # Django's own answer
        signals.got_request_exception.send(sender=None, request=request)
        response = get_resolver(get_urlconf()).resolve_error_handler(500)(request)
        log_response(
            "%s: %s",
            response.reason_phrase,
            request.path,
            response=response,
            request=request,
            exception=exception,
        )
        return response
