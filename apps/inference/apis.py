from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.response import Response

from apps.core.errors import Forbidden
from apps.inference import selectors, services
from apps.inference.models import BackendKind, BackendState, CapParameter
from apps.tenants.api import TenantApi
from apps.tenants.permissions import Action

CREDENTIAL_HELP = (
    "API credential sent to the backend (bearer token; `x-api-key` for kind anthropic). Write-only: stored "
    "encrypted, shown only as credential_set and credential_last4. Setting or clearing it needs the admin role."
)


class CapabilityInputSerializer(serializers.Serializer):
    """The capability flags and the cap field; one not given keeps its value (on registration: the kind's
    default)."""

    returns_token_ids = serializers.BooleanField(
        required=False, allow_null=True, default=None, help_text="Answers carry prompt and completion ids."
    )
    returns_logprobs = serializers.BooleanField(
        required=False, allow_null=True, default=None, help_text="Answers carry per-token logprobs."
    )
    returns_token_versions = serializers.BooleanField(
        required=False,
        allow_null=True,
        default=None,
        help_text="Answers carry each completion token's policy version.",
    )
    accepts_return_token_ids = serializers.BooleanField(
        required=False,
        allow_null=True,
        default=None,
        help_text="The server accepts the return_token_ids parameter (the gateway sends it only then).",
    )
    cap_parameter = serializers.ChoiceField(
        choices=CapParameter.choices,
        required=False,
        allow_null=True,
        default=None,
        help_text="The field the server reads a chat completion's cap from; the gateway sends the cap in it "
        "only. Default: max_completion_tokens for openai_compatible (OpenAI's reasoning models refuse "
        "max_tokens), max_tokens for the other kinds.",
    )


def _require_credential_rights(api: TenantApi) -> None:
    """A backend's credential, and where a credentialed backend's traffic goes, are the admin's to change."""
    if not api.can(Action.BACKEND_CREDENTIAL_MANAGE):
        role = api.membership.role if api.membership is not None else "key"
        raise Forbidden(f"the role {role} may not {Action.BACKEND_CREDENTIAL_MANAGE}", code="role_forbidden")


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
    credential_set = serializers.BooleanField(help_text="Whether the backend has an API credential.")
    credential_last4 = serializers.CharField(help_text="The credential's last four characters ('' if none).")
    credential_updated_at = serializers.DateTimeField(allow_null=True)
    returns_token_ids = serializers.BooleanField()
    returns_logprobs = serializers.BooleanField()
    returns_token_versions = serializers.BooleanField()
    accepts_return_token_ids = serializers.BooleanField()
    cap_parameter = serializers.CharField(help_text="The field that carries a chat completion's cap.")


class BackendListApi(TenantApi):
    actions = {"GET": Action.BACKEND_VIEW, "POST": Action.BACKEND_MANAGE}

    @extend_schema_serializer(component_name="InferenceBackendRegister")
    class InputSerializer(CapabilityInputSerializer):
        name = serializers.SlugField(max_length=64)
        base_url = serializers.URLField(max_length=300)
        kind = serializers.ChoiceField(choices=BackendKind.choices)
        served_model = serializers.CharField(max_length=200)
        model_version = serializers.CharField(max_length=64, required=False, default="", allow_blank=True)
        weight = serializers.IntegerField(min_value=0, max_value=1000, default=1)
        credential = serializers.CharField(
            required=False, write_only=True, trim_whitespace=False, max_length=4096, help_text=CREDENTIAL_HELP
        )

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
        if body.validated_data.get("credential"):
            _require_credential_rights(self)
        backend = services.backend_register(tenant=self.tenant, actor=self.actor, **body.validated_data)
        return Response(BackendOutputSerializer(backend).data, status=201)


class BackendDetailApi(TenantApi):
    actions = {"GET": Action.BACKEND_VIEW, "PATCH": Action.BACKEND_MANAGE, "DELETE": Action.BACKEND_MANAGE}

    @extend_schema_serializer(component_name="InferenceBackendUpdate")
    class InputSerializer(CapabilityInputSerializer):
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
        credential = serializers.CharField(
            required=False,
            allow_null=True,
            allow_blank=True,
            write_only=True,
            trim_whitespace=False,
            max_length=4096,
            help_text=CREDENTIAL_HELP + ' null or "" clears it.',
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
        backend = selectors.backend_get(tenant=self.tenant, backend_id=backend_id)  # another tenant's: 404
        changes = {key: value for key, value in body.validated_data.items() if value is not None}
        if "credential" in body.validated_data:
            changes["credential"] = body.validated_data["credential"] or ""
            _require_credential_rights(self)
        if (
            backend.credential_set
            and changes.get("base_url", backend.base_url).rstrip("/") != backend.base_url
        ):
            _require_credential_rights(self)  # the credential would follow the backend to its new address
        backend = services.backend_update(
            tenant=self.tenant, actor=self.actor, backend_id=backend_id, changes=changes
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
