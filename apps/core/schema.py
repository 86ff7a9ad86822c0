"""The OpenAPI schema generator, taught the house conventions (STYLE.md, "APIs"):

- a view's nested `InputSerializer` is its request body and `OutputSerializer` its response, so an
  APIView needs no `serializer_class` to be documented;
- nested serializers are named after their view (`TrajectoryReplayApi.InputSerializer` becomes the
  component `TrajectoryReplayApiInput`), so two views' `InputSerializer`s never collide;
- a view that declares neither is documented as taking and returning a JSON object;
- every operation documents the errors it can answer, in the one error shape of apps/core/errors.py
  (`Error`): 401 and 403 (authentication, role or scope), 404 (a missing object, or a signed-in person's
  unknown tenant), 400 where it takes parameters or a body, 409 on writes (a taken name, a state that
  forbids the change), 413 and 415 where it takes a body. A view adds statuses of its own with
  `error_statuses = {...}` (for example 410 for something that has ended).
An explicit `@extend_schema(...)` on a method still wins over all of this.
"""

from django.conf import settings
from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers
from rest_framework.permissions import BasePermission

BODY_METHODS = {"POST", "PUT", "PATCH"}
WRITE_METHODS = BODY_METHODS | {"DELETE"}
ERROR_DESCRIPTIONS = {
    400: "The request is invalid (see `error.fields`).",
    401: "No credentials, or credentials that are not valid.",
    403: "The role or the API key's scopes do not allow this.",
    404: "No such object in this tenant.",
    409: "The change conflicts with the object's state or with another object.",
    410: "The object has ended.",
    413: "The request body is too large.",
    415: "The request body's media type is not supported.",
    429: "Too many requests; retry later.",
}


class ErrorDetailSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="Stable, for programs.")
    message = serializers.CharField(help_text="For people.")
    type = serializers.CharField()
    fields = serializers.DictField(  # type: ignore[assignment]  # the error body's key, not Serializer.fields
        required=False, help_text="A field's name to its problems."
    )


class ErrorSerializer(serializers.Serializer):
    error = ErrorDetailSerializer()


class AutoSchema(SpectacularAutoSchema):
    def get_serializer_name(self, serializer, direction):
        outer, _, inner = type(serializer).__qualname__.rpartition(".")
        if outer and "<locals>" not in outer:
            return outer.replace(".", "") + inner.removesuffix("Serializer")
        return super().get_serializer_name(serializer, direction)

    def _nested(self, name):
        return getattr(type(self.view), name, None)

    def get_request_serializer(self):
        if self.method not in BODY_METHODS:
            return None
        serializer = self._nested("InputSerializer")
        if serializer is not None:
            return serializer()
        if hasattr(self.view, "serializer_class") or hasattr(self.view, "get_serializer_class"):
            return super().get_request_serializer()
        return OpenApiTypes.OBJECT

    def get_response_serializers(self):
        serializer = self._nested("OutputSerializer")
        if serializer is not None:
            return serializer()
        if hasattr(self.view, "serializer_class") or hasattr(self.view, "get_serializer_class"):
            return super().get_response_serializers()
        return OpenApiTypes.OBJECT

    def error_statuses(self) -> set[int]:
        statuses = {401, 403, 404}
        if self.method in BODY_METHODS:
            statuses |= {400, 413, 415}
        elif self._get_parameters():
            statuses.add(400)
        if self.method in WRITE_METHODS:
            statuses.add(409)
        return statuses | set(getattr(type(self.view), "error_statuses", ()))

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        for status in sorted(self.error_statuses()):
            responses.setdefault(
                str(status),
                self._get_response_for_code(
                    OpenApiResponse(ErrorSerializer, description=ERROR_DESCRIPTIONS.get(status, "")),
                    str(status),
                    direction=direction,
                ),
            )
        return responses


class ApiDocsPermission(BasePermission):
    """Who may read /api/schema/ and /api/docs/: anyone while AREAL_API_DOCS_PUBLIC is on (the embedded
    default); otherwise (production) only a signed-in person or a valid API key."""

    def has_permission(self, request, view):
        return settings.AREAL_API_DOCS_PUBLIC or bool(request.user and request.user.is_authenticated)
