from drf_spectacular.utils import extend_schema, extend_schema_serializer, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response

from apps.audit.selectors import audit_event_list
from apps.audit.services import audit_verify
from apps.tenants.api import TenantApi
from apps.tenants.permissions import Action


class AuditEventListApi(TenantApi):
    """Newest first. Filters: verb (prefix, e.g. `api_key.`), actor (substring), since, until (RFC 3339)."""

    actions = {"GET": Action.AUDIT_VIEW}

    class FilterSerializer(serializers.Serializer):
        verb = serializers.CharField(required=False, max_length=64)
        actor = serializers.CharField(required=False, max_length=200)
        since = serializers.DateTimeField(required=False)
        until = serializers.DateTimeField(required=False)

    @extend_schema_serializer(component_name="AuditEvent")
    class OutputSerializer(serializers.Serializer):
        sequence = serializers.IntegerField()
        occurred_at = serializers.DateTimeField()
        actor_kind = serializers.CharField()
        actor_label = serializers.CharField()
        verb = serializers.CharField()
        target_type = serializers.CharField()
        target_id = serializers.CharField()
        data = serializers.JSONField()
        previous_hash = serializers.CharField()
        hash = serializers.CharField()

    @extend_schema(parameters=[FilterSerializer], responses=OutputSerializer(many=True))
    def get(self, request):
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        events = audit_event_list(tenant=self.tenant, **filters.validated_data)
        return self.paginated(events, self.OutputSerializer)


class AuditVerifyApi(TenantApi):
    actions = {"GET": Action.AUDIT_VIEW}

    @extend_schema(
        responses=inline_serializer(
            "AuditVerification",
            {
                "intact": serializers.BooleanField(),
                "breaks": serializers.ListField(child=serializers.DictField()),
            },
        )
    )
    def get(self, request):
        breaks = audit_verify(tenant=self.tenant)
        return Response(
            {
                "intact": not breaks,
                "breaks": [{"sequence": item.sequence, "problem": item.problem} for item in breaks],
            }
        )
