from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.response import Response

from apps.core.api import TenantApi
from apps.inference import selectors, services
from apps.inference.models import BackendKind, BackendState
from apps.tenants.permissions import Action


@extend_schema_serializer(component_name="InferenceBackend")
class BackendOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    base_url = serializers.CharField()
    kind = serializers.CharField()
    served_model = serializers.CharField()
    model_version = serializers.CharField()
    reported_version = serializers.CharField(
        help_text="The version the server itself reported at its last check."
    )
    weight = serializers.IntegerField()
    state = serializers.CharField()
    last_checked_at = serializers.DateTimeField(allow_null=True)
    last_error = serializers.CharField()


class BackendListApi(TenantApi):
    actions = {"GET": Action.BACKEND_VIEW, "POST": Action.BACKEND_MANAGE}

    @extend_schema_serializer(component_name="InferenceBackendRegister")
    class InputSerializer(serializers.Serializer):
        name = serializers.SlugField(max_length=64)
        base_url = serializers.URLField(max_length=300)
        kind = serializers.ChoiceField(choices=BackendKind.choices)
        served_model = serializers.CharField(max_length=200)
        model_version = serializers.CharField(max_length=64, required=False, default="", allow_blank=True)
        weight = serializers.IntegerField(min_value=0, max_value=1000, default=1)

    @extend_schema(
        parameters=[OpenApiParameter("model", str, description="only backends serving this model")],
        responses=BackendOutputSerializer(many=True),
    )
    def get(self, request):
        return self.paginated(
            selectors.backend_list(tenant=self.tenant, served_model=request.query_params.get("model")),
            BackendOutputSerializer,
        )

    @extend_schema(request=InputSerializer, responses={201: BackendOutputSerializer})
    def post(self, request):
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        backend = services.backend_register(tenant=self.tenant, actor=self.actor, **body.validated_data)
        return Response(BackendOutputSerializer(backend).data, status=201)


class BackendDetailApi(TenantApi):
    actions = {"GET": Action.BACKEND_VIEW, "PATCH": Action.BACKEND_MANAGE, "DELETE": Action.BACKEND_MANAGE}

    @extend_schema_serializer(component_name="InferenceBackendUpdate")
    class InputSerializer(serializers.Serializer):
        base_url = serializers.URLField(max_length=300, required=False)
        kind = serializers.ChoiceField(choices=BackendKind.choices, required=False)
        served_model = serializers.CharField(max_length=200, required=False)
        model_version = serializers.CharField(max_length=64, required=False, allow_blank=True)
        weight = serializers.IntegerField(min_value=0, max_value=1000, required=False)
        state = serializers.ChoiceField(
            choices=[BackendState.DRAINING, BackendState.UNKNOWN],
            required=False,
            help_text="draining: no new sessions; unknown: re-enter health checks",
        )

    @extend_schema(responses=BackendOutputSerializer)
    def get(self, request, backend_id):
        return Response(
            BackendOutputSerializer(selectors.backend_get(tenant=self.tenant, backend_id=backend_id)).data
        )

    @extend_schema(request=InputSerializer, responses=BackendOutputSerializer)
    def patch(self, request, backend_id):
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        backend = services.backend_update(
            tenant=self.tenant, actor=self.actor, backend_id=backend_id, changes=dict(body.validated_data)
        )
        return Response(BackendOutputSerializer(backend).data)

    @extend_schema(responses={204: None})
    def delete(self, request, backend_id):
        services.backend_remove(tenant=self.tenant, actor=self.actor, backend_id=backend_id)
        return Response(status=204)


class BackendCheckApi(TenantApi):
    """Probes the backend now instead of waiting for the next beat tick."""

    actions = {"POST": Action.BACKEND_MANAGE}

    @extend_schema(request=None, responses=BackendOutputSerializer)
    def post(self, request, backend_id):
        backend = selectors.backend_get(tenant=self.tenant, backend_id=backend_id)
        backend = services.backend_check(backend=backend)
        return Response(BackendOutputSerializer(backend).data)
