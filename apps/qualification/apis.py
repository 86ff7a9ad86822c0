"""REST API: reviews, verdicts (read, run on demand, override), length limits and the training queue."""

import uuid

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from apps.core.errors import ValidationFailed
from apps.qualification import selectors, services
from apps.qualification.models import QualificationStatus, ReviewStatus
from apps.tenants.api import BIG_INTEGER_COLUMN_MAX, INTEGER_COLUMN_MAX, TenantApi
from apps.tenants.authentication import KeyPrincipal
from apps.tenants.permissions import Action
from workers.qualification.gates import GATE_CODES


class ReviewSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    trajectory_id = serializers.UUIDField()
    status = serializers.CharField()
    reviewer = serializers.CharField(source="reviewer_label")
    note = serializers.CharField()
    created_at = serializers.DateTimeField()


class QualificationSerializer(serializers.Serializer):
    trajectory_id = serializers.UUIDField()
    status = serializers.CharField()
    reasons = serializers.ListField(child=serializers.CharField())
    gate_status = serializers.CharField()
    gate_reasons = serializers.ListField(child=serializers.CharField())
    training_reward = serializers.FloatField(allow_null=True)
    content_hash = serializers.CharField()
    evaluated_at = serializers.DateTimeField(allow_null=True)
    override_status = serializers.CharField()
    override_reason = serializers.CharField()
    overridden_by = serializers.CharField()
    overridden_at = serializers.DateTimeField(allow_null=True)


class ReviewListApi(TenantApi):
    """GET: reviews, newest first (filters trajectory_id, status). POST: a reviewer's verdict."""

    actions = {"GET": Action.TRAJECTORY_VIEW, "POST": Action.TRAJECTORY_REVIEW}

    class InputSerializer(serializers.Serializer):
        trajectory_id = serializers.UUIDField()
        status = serializers.ChoiceField(choices=ReviewStatus.choices)
        note = serializers.CharField(required=False, allow_blank=True, default="", max_length=5000)

    @extend_schema(
        operation_id="review_list",
        parameters=[OpenApiParameter("trajectory_id", uuid.UUID), OpenApiParameter("status", str)],
        responses=ReviewSerializer(many=True),
    )
    def get(self, request):
        trajectory_id = request.query_params.get("trajectory_id")
        if trajectory_id is not None:
            try:
                trajectory_id = uuid.UUID(trajectory_id)
            except ValueError:
                raise ValidationFailed(
                    "trajectory_id must be a UUID", fields={"trajectory_id": ["a UUID"]}
                ) from None
        return self.paginated(
            selectors.review_list(
                tenant=self.tenant, trajectory_id=trajectory_id, status=request.query_params.get("status")
            ),
            ReviewSerializer,
        )

    @extend_schema(operation_id="review_create", request=InputSerializer, responses={201: ReviewSerializer})
    def post(self, request):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        reviewer = None if isinstance(request.user, KeyPrincipal) else request.user
        review = services.review_set(
            tenant=self.tenant, actor=self.actor, reviewer=reviewer, **data.validated_data
        )
        return Response(ReviewSerializer(review).data, status=201)


def _verdict(tenant, trajectory_id) -> dict:
    trajectory = selectors.trajectory_for_qualification(tenant=tenant, trajectory_id=trajectory_id)
    row = selectors.qualification_get(tenant=tenant, trajectory_id=trajectory.pk)
    review = selectors.review_current(tenant=tenant, trajectory_id=trajectory.pk)
    body = (
        QualificationSerializer(row).data
        if row
        else {
            "trajectory_id": str(trajectory.pk),
            "status": QualificationStatus.PENDING,
            "reasons": [],
            "gate_status": QualificationStatus.PENDING,
            "gate_reasons": [],
            "training_reward": None,
        }
    )
    body["review"] = ReviewSerializer(review).data if review else {"status": ReviewStatus.UNREVIEWED}
    return body


class QualificationDetailApi(TenantApi):
    actions = {"GET": Action.TRAJECTORY_VIEW}

    @extend_schema(operation_id="qualification_detail")
    def get(self, request, trajectory_id):
        return Response(_verdict(self.tenant, trajectory_id))


class QualificationRunApi(TenantApi):
    """Re-runs the gates on a worker (202); GET the detail for the verdict."""

    actions = {"POST": Action.QUALIFICATION_RUN}

    @extend_schema(operation_id="qualification_run", request=None, responses={202: dict})
    def post(self, request, trajectory_id):
        trajectory = selectors.trajectory_for_qualification(tenant=self.tenant, trajectory_id=trajectory_id)
        services.qualification_enqueue(trajectory_id=trajectory.pk)
        return Response({"trajectory_id": str(trajectory.pk), "queued": True}, status=202)


class QualificationOverrideApi(TenantApi):
    actions = {"POST": Action.QUALIFICATION_OVERRIDE}

    class InputSerializer(serializers.Serializer):
        status = serializers.ChoiceField(choices=["qualified", "disqualified", ""], allow_blank=True)
        reason = serializers.CharField(max_length=5000)

    @extend_schema(operation_id="qualification_override", request=InputSerializer)
    def post(self, request, trajectory_id):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        services.qualification_override(
            tenant=self.tenant, actor=self.actor, trajectory_id=trajectory_id, **data.validated_data
        )
        return Response(_verdict(self.tenant, trajectory_id))


class QualificationListApi(TenantApi):
    """Verdicts, newest trajectory first; filters status, reason (a gate code), agent, task_id, group_id."""

    actions = {"GET": Action.TRAJECTORY_VIEW}

    @extend_schema(
        operation_id="qualification_list",
        responses=QualificationSerializer(many=True),
        parameters=[
            OpenApiParameter(name, str) for name in ("status", "reason", "agent", "task_id", "group_id")
        ],
    )
    def get(self, request):
        params = request.query_params
        return self.paginated(
            selectors.qualification_list(
                tenant=self.tenant,
                status=params.get("status"),
                reason=params.get("reason"),
                agent=params.get("agent"),
                task_id=params.get("task_id"),
                group_id=params.get("group_id"),
            ),
            QualificationSerializer,
        )


class TrainingQueueApi(TenantApi):
    """Qualified trajectories waiting by agent, task and group; disqualified counts by reason code."""

    actions = {"GET": Action.TRAJECTORY_VIEW}

    @extend_schema(operation_id="training_queue")
    def get(self, request):
        return Response(
            {
                "waiting": selectors.training_queue(tenant=self.tenant),
                "disqualified": selectors.disqualified_counts(tenant=self.tenant),
                "gate_codes": list(GATE_CODES),
            }
        )


class QualificationLimitsApi(TenantApi):
    actions = {"GET": Action.TRAJECTORY_VIEW, "PUT": Action.QUALIFICATION_OVERRIDE}

    class LimitsSerializer(serializers.Serializer):
        min_steps = serializers.IntegerField(min_value=1, max_value=INTEGER_COLUMN_MAX)
        max_steps = serializers.IntegerField(min_value=1, max_value=INTEGER_COLUMN_MAX)
        max_tokens = serializers.IntegerField(min_value=1, max_value=BIG_INTEGER_COLUMN_MAX)

    @extend_schema(operation_id="qualification_limits", responses=LimitsSerializer)
    def get(self, request):
        return Response(self.LimitsSerializer(selectors.qualification_limits(tenant=self.tenant)).data)

    @extend_schema(
        operation_id="qualification_limits_set", request=LimitsSerializer, responses=LimitsSerializer
    )
    def put(self, request):
        data = self.LimitsSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        row = services.qualification_limits_set(tenant=self.tenant, actor=self.actor, **data.validated_data)
        return Response(self.LimitsSerializer(row).data)
