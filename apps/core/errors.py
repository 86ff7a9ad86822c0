"""Domain errors with stable codes, and the one handler that renders every API error.

Every API error has the shape {"error": {"code", "message", "type", "fields"?}}: the code is stable
for programs, the message is for people, fields maps a field name to its problems. The type follows the
HTTP status (apps.core.error_types, the table the gateway's error shapes use too) unless an error names its
own.
"""

import logging

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import InterfaceError, OperationalError
from django.http import Http404, JsonResponse
from django.views import defaults
from rest_framework import exceptions as drf
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from apps.core.error_types import error_type

logger = logging.getLogger(__name__)


class DomainError(Exception):
    status = 400
    code = "invalid"
    type: str | None = None  # None: the status's type (apps.core.error_types); set only to differ from it

    def __init__(self, message: str, *, code: str | None = None, fields: dict | None = None):
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        self.fields = fields or {}


class ValidationFailed(DomainError):
    status = 400
    code = "invalid"


class NotFound(DomainError):
    status = 404
    code = "not_found"


class Forbidden(DomainError):
    status = 403
    code = "forbidden"


class Conflict(DomainError):
    status = 409
    code = "conflict"


class Gone(DomainError):
    status = 410
    code = "gone"


def error_body(*, code: str, message: str, type: str, fields: dict | None = None) -> dict:
    error: dict[str, object] = {"code": code, "message": message, "type": type}
    if fields:
        error["fields"] = fields
    return {"error": error}


def _flatten_detail(detail) -> str:
    if isinstance(detail, list):
        return "; ".join(_flatten_detail(item) for item in detail)
    if isinstance(detail, dict):
        return "; ".join(f"{key}: {_flatten_detail(value)}" for key, value in detail.items())
    return str(detail)


DATABASE_RETRY_AFTER_SECONDS = 2


def api_exception_handler(exc, context):
    if isinstance(exc, OperationalError | InterfaceError):  # the database is down or restarting: retry
        logger.warning("API request failed: the database is unavailable", exc_info=exc)
        body = error_body(
            code="database_unavailable",
            message="the database is unavailable; retry shortly",
            type=error_type(503),
        )
        return Response(body, status=503, headers={"Retry-After": str(DATABASE_RETRY_AFTER_SECONDS)})
    if isinstance(exc, DomainError):
        body = error_body(
            code=exc.code, message=exc.message, type=exc.type or error_type(exc.status), fields=exc.fields
        )
        return Response(body, status=exc.status)
    if isinstance(exc, Http404):
        exc = drf.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = drf.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    status = response.status_code
    if isinstance(exc, drf.ValidationError):
        detail = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        body = error_body(
            code="invalid",
            message="The request body is invalid: " + _flatten_detail(detail),
            type=error_type(400),
            fields=detail,
        )
    else:
        code = getattr(exc, "default_code", "error")
        detail = getattr(exc, "detail", str(exc))
        if hasattr(detail, "code") and detail.code:
            code = detail.code
        body = error_body(code=code, message=_flatten_detail(detail), type=error_type(status))
    response.data = body
    return response


def server_error(request):
    """Django's 500: the API's error shape under /api/ (a client parsing JSON never gets an HTML page)."""
    if request.path.startswith("/api/"):
        body = error_body(code="internal_error", message="internal server error", type=error_type(500))
        return JsonResponse(body, status=500)
    return defaults.server_error(request)


def page_not_found(request, exception):
    """Django's 404 (no URL pattern matched, e.g. a non-numeric id): the API's error shape under /api/, so an
    API client never gets an HTML page; the default page elsewhere."""
    if request.path.startswith("/api/"):
        body = error_body(code="not_found", message=f"no endpoint {request.path}", type=error_type(404))
        return JsonResponse(body, status=404)
    return defaults.page_not_found(request, exception)
