"""The OpenAPI schema generator, taught the house conventions (STYLE.md, "APIs"):

- a view's nested `InputSerializer` is its request body and `OutputSerializer` its response, so an
  APIView needs no `serializer_class` to be documented;
- nested serializers are named after their view (`TrajectoryReplayApi.InputSerializer` becomes the
  component `TrajectoryReplayApiInput`), so two views' `InputSerializer`s never collide;
- a view that declares neither is documented as taking and returning a JSON object.
An explicit `@extend_schema(...)` on a method still wins over all of this.
"""

from django.conf import settings
from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from drf_spectacular.types import OpenApiTypes
from rest_framework.permissions import BasePermission

BODY_METHODS = {"POST", "PUT", "PATCH"}


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


class ApiDocsPermission(BasePermission):
    """Who may read /api/schema/ and /api/docs/: anyone while AREAL_API_DOCS_PUBLIC is on (the embedded
    default); otherwise (production) only a signed-in person or a valid API key."""

    def has_permission(self, request, view):
        return settings.AREAL_API_DOCS_PUBLIC or bool(request.user and request.user.is_authenticated)
