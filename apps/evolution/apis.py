"""REST API of the evolution control plane under /api/v1/evolution/ (the tenant comes from the key or the
session, like every TenantApi): policies, their signal series and tool-failure clusters, decisions with
approve / reject, and harness versions. Each view: parse → select or lock → service → serialize."""

from datetime import UTC

from django.utils import timezone
from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from apps.core.errors import ValidationFailed
from apps.evolution import policies, selectors
from apps.evolution.decisions import decision_approve, decision_payload, decision_reject
from apps.evolution.models import DecisionKind, DecisionStatus
from apps.tenants.api import INTEGER_COLUMN_MAX, TenantApi
from apps.tenants.permissions import Action


class PolicyOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    agent_name = serializers.CharField()
    model = serializers.CharField()
    mode = serializers.CharField()
    enabled = serializers.BooleanField()
    window_seconds = serializers.IntegerField()
    signals = serializers.JSONField()
    update_kinds = serializers.JSONField()
    recipe = serializers.JSONField()
    gate = serializers.JSONField()
    release_plan = serializers.JSONField()
    approval_mode = serializers.CharField()
    cooldown_seconds = serializers.IntegerField()
    compute_budget_seconds = serializers.IntegerField()
    decision_ttl_seconds = serializers.IntegerField()
    harness_proposer = serializers.CharField()
    harness_model = serializers.CharField()
    revision = serializers.IntegerField()
    updated_by = serializers.CharField()
    last_tick_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()


class PolicySettingsSerializer(serializers.Serializer):
    """The settings' JSON types only; ranges, known names and contradictions are the service's (field errors
    keyed `signals.<name>`, `recipe.<key>`, `gate.<key>`, `release_plan.<key>`)."""

    agent_name = serializers.CharField(max_length=200, required=False, allow_blank=True)
    model = serializers.CharField(max_length=200, required=False)
    mode = serializers.CharField(max_length=16, required=False)
    enabled = serializers.BooleanField(required=False)
    window_seconds = serializers.IntegerField(min_value=0, max_value=INTEGER_COLUMN_MAX, required=False)
    signals = serializers.JSONField(required=False)
    update_kinds = serializers.JSONField(required=False)
    recipe = serializers.JSONField(required=False)
    gate = serializers.JSONField(required=False)
    release_plan = serializers.JSONField(required=False)
    approval_mode = serializers.CharField(max_length=16, required=False)
    cooldown_seconds = serializers.IntegerField(min_value=0, max_value=INTEGER_COLUMN_MAX, required=False)
    compute_budget_seconds = serializers.IntegerField(
        min_value=0, max_value=INTEGER_COLUMN_MAX, required=False
    )
    decision_ttl_seconds = serializers.IntegerField(min_value=0, max_value=INTEGER_COLUMN_MAX, required=False)
    harness_proposer = serializers.CharField(max_length=16, required=False)
    harness_model = serializers.CharField(max_length=200, required=False, allow_blank=True)

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = set(data) - set(self.fields) - {"revision"}
            if unknown:
                raise serializers.ValidationError(
                    {name: ["not a policy setting"] for name in sorted(unknown)}
                )
        return super().to_internal_value(data)


class PolicyListApi(TenantApi):
    actions = {"GET": Action.EVOLUTION_VIEW, "POST": Action.EVOLUTION_MANAGE}

    class InputSerializer(PolicySettingsSerializer):
        model = serializers.CharField(max_length=200)

    @extend_schema(responses=PolicyOutputSerializer(many=True))
    def get(self, request):
        return self.paginated(selectors.policy_list(tenant=self.tenant), PolicyOutputSerializer)

    @extend_schema(request=InputSerializer, responses={201: PolicyOutputSerializer})
    def post(self, request):
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        policy = policies.policy_create(tenant=self.tenant, actor=self.actor, **body.validated_data)
        return Response(PolicyOutputSerializer(policy).data, status=201)


class PolicyDetailApi(TenantApi):
    """GET; PATCH with the `revision` last read (409 `policy_stale` when someone edited it meanwhile); DELETE
    (409 `policy_busy` while one of its decisions is under way)."""

    actions = {
        "GET": Action.EVOLUTION_VIEW,
        "PATCH": Action.EVOLUTION_MANAGE,
        "DELETE": Action.EVOLUTION_MANAGE,
    }

    class InputSerializer(PolicySettingsSerializer):
        revision = serializers.IntegerField(min_value=1, max_value=INTEGER_COLUMN_MAX)

    @extend_schema(responses=PolicyOutputSerializer)
    def get(self, request, policy_id):
        policy = selectors.policy_get(tenant=self.tenant, policy_id=policy_id)
        return Response(PolicyOutputSerializer(policy).data)

    @extend_schema(request=InputSerializer, responses=PolicyOutputSerializer)
    def patch(self, request, policy_id):
        selectors.policy_get(tenant=self.tenant, policy_id=policy_id)  # another tenant's: 404 before the body
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        fields = dict(body.validated_data)
        revision = fields.pop("revision")
        policy = policies.policy_update(
            tenant=self.tenant, actor=self.actor, policy_id=policy_id, revision=revision, **fields
        )
        return Response(PolicyOutputSerializer(policy).data)

    @extend_schema(parameters=[OpenApiParameter("revision", int)], responses={204: None})
    def delete(self, request, policy_id):
        revision = request.query_params.get("revision")
        if revision is not None and not revision.isdigit():
            raise ValidationFailed("revision is a whole number", fields={"revision": ["a whole number"]})
        policies.policy_delete(
            tenant=self.tenant,
            actor=self.actor,
            policy_id=policy_id,
            revision=int(revision) if revision is not None else None,
        )
        return Response(status=204)


class SignalPointOutputSerializer(serializers.Serializer):
    name = serializers.CharField()
    value = serializers.FloatField(allow_null=True)
    window_seconds = serializers.IntegerField()
    details = serializers.JSONField()
    at = serializers.DateTimeField()


def _moment(text: str, *, field: str):
    moment = parse_datetime(text)
    if moment is None:
        raise ValidationFailed(f"{field} must be an ISO 8601 date-time", fields={field: ["invalid"]})
    return timezone.make_aware(moment, UTC) if timezone.is_naive(moment) else moment


class PolicySignalListApi(TenantApi):
    """The policy's signal time series, oldest first: ?name= one signal, ?since= from that moment on."""

    actions = {"GET": Action.EVOLUTION_VIEW}

    @extend_schema(
        parameters=[OpenApiParameter("name", str), OpenApiParameter("since", str)],
        responses=SignalPointOutputSerializer(many=True),
    )
    def get(self, request, policy_id):
        policy = selectors.policy_get(tenant=self.tenant, policy_id=policy_id)
        since = request.query_params.get("since")
        return self.paginated(
            selectors.signal_series(
                tenant=self.tenant,
                policy=policy,
                name=request.query_params.get("name") or None,
                since=_moment(since, field="since") if since else None,
            ),
            SignalPointOutputSerializer,
        )


class ClusterOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    policy = serializers.IntegerField(source="policy_id")
    tool = serializers.CharField()
    kind = serializers.CharField()
    signature = serializers.CharField()
    argument_shape = serializers.CharField()
    count = serializers.IntegerField()
    first_seen = serializers.DateTimeField()
    last_seen = serializers.DateTimeField()
    examples = serializers.JSONField()
    example_arguments = serializers.JSONField()


def _policy_filter(request, tenant):
    """The ?policy= filter as a policy of this tenant's (404 otherwise), or None."""
    policy_id = request.query_params.get("policy")
    return selectors.policy_get(tenant=tenant, policy_id=policy_id).pk if policy_id else None


class ClusterListApi(TenantApi):
    """Tool-failure clusters, the most frequent first; ?policy= one policy's."""

    actions = {"GET": Action.EVOLUTION_VIEW}

    @extend_schema(parameters=[OpenApiParameter("policy", int)], responses=ClusterOutputSerializer(many=True))
    def get(self, request):
        policy_id = _policy_filter(request, self.tenant)
        return self.paginated(
            selectors.cluster_list(tenant=self.tenant, policy_id=policy_id), ClusterOutputSerializer
        )


class DecisionOutputSerializer(serializers.BaseSerializer):
    """The timeline's shape (`decisions.decision_payload`), the same as the live stream's."""

    def to_representation(self, decision):
        return decision_payload(decision)


def _choice(request, name: str, choices) -> str | None:
    value = request.query_params.get(name) or None
    if value is not None and value not in choices:
        raise ValidationFailed(f"unknown {name} {value!r}", fields={name: [f"one of {', '.join(choices)}"]})
    return value


class DecisionListApi(TenantApi):
    """Decisions, newest first; ?policy=, ?status=, ?kind= narrow them."""

    actions = {"GET": Action.EVOLUTION_VIEW}

    @extend_schema(
        operation_id="evolution_decision_list",
        parameters=[
            OpenApiParameter("policy", int),
            OpenApiParameter("status", str, enum=DecisionStatus.values),
            OpenApiParameter("kind", str, enum=DecisionKind.values),
        ],
        responses=dict,
    )
    def get(self, request):
        return self.paginated(
            selectors.decision_list(
                tenant=self.tenant,
                policy_id=_policy_filter(request, self.tenant),
                status=_choice(request, "status", DecisionStatus.values),
                kind=_choice(request, "kind", DecisionKind.values),
            ).select_related("policy"),  # a proposal's approval question names the policy's model
            DecisionOutputSerializer,
        )


class DecisionDetailApi(TenantApi):
    actions = {"GET": Action.EVOLUTION_VIEW}

    @extend_schema(operation_id="evolution_decision_detail", responses=dict)
    def get(self, request, decision_id):
        return Response(decision_payload(selectors.decision_get(tenant=self.tenant, decision_id=decision_id)))


class DecisionApproveApi(TenantApi):
    """Adds the caller's approval (two-person mode: two different people). 409 once decided or approved by
    this person already; 410 after it expired."""

    actions = {"POST": Action.EVOLUTION_APPROVE}
    error_statuses = {410}

    @extend_schema(request=None, responses=dict)
    def post(self, request, decision_id):
        decision = decision_approve(tenant=self.tenant, actor=self.actor, decision_id=decision_id)
        return Response(decision_payload(decision))


class DecisionRejectApi(TenantApi):
    """Rejects a proposal with a reason; nothing is started. 409 once decided, 410 after it expired."""

    actions = {"POST": Action.EVOLUTION_APPROVE}
    error_statuses = {410}

    class InputSerializer(serializers.Serializer):
        reason = serializers.CharField(max_length=500, required=False, default="", allow_blank=True)

    @extend_schema(request=InputSerializer, responses=dict)
    def post(self, request, decision_id):
        selectors.decision_get(tenant=self.tenant, decision_id=decision_id)  # another tenant's: 404 first
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        decision = decision_reject(
            tenant=self.tenant,
            actor=self.actor,
            decision_id=decision_id,
            reason=body.validated_data["reason"],
        )
        return Response(decision_payload(decision))


class HarnessVersionOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    model = serializers.CharField()
    number = serializers.IntegerField()
    label = serializers.CharField()
    parent = serializers.IntegerField(source="parent_id", allow_null=True)
    system_prompt = serializers.CharField()
    exemplars = serializers.JSONField()
    tool_routing = serializers.JSONField()
    tool_versions = serializers.JSONField()
    proposer = serializers.CharField()
    rationale = serializers.CharField()
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()


class HarnessVersionListApi(TenantApi):
    actions = {"GET": Action.EVOLUTION_VIEW}

    @extend_schema(
        parameters=[OpenApiParameter("model", str)], responses=HarnessVersionOutputSerializer(many=True)
    )
    def get(self, request):
        return self.paginated(
            selectors.harness_version_list(
                tenant=self.tenant, model=request.query_params.get("model") or None
            ),
            HarnessVersionOutputSerializer,
        )


class HarnessVersionDetailApi(TenantApi):
    actions = {"GET": Action.EVOLUTION_VIEW}

    @extend_schema(responses=HarnessVersionOutputSerializer)
    def get(self, request, harness_id):
        harness = selectors.harness_version_get(tenant=self.tenant, harness_id=harness_id)
        return Response(HarnessVersionOutputSerializer(harness).data)
