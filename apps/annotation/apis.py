"""REST API: annotation queues, the next item, labels, skips, resolutions, agreement and label export."""

import json

from django.http import StreamingHttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from apps.annotation import selectors, services
from apps.core.errors import Forbidden
from apps.tenants.api import TenantApi
from apps.tenants.authentication import KeyPrincipal
from apps.tenants.permissions import Action


class QueueSerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    name = serializers.CharField(max_length=120)
    spec = serializers.CharField(source="spec.name", read_only=True)
    spec_id = serializers.IntegerField(write_only=True)
    filters = serializers.DictField(child=serializers.CharField(), required=False, default=dict)
    annotators_per_item = serializers.IntegerField(min_value=1, max_value=10, required=False, default=1)
    assignee_ids = serializers.ListField(
        child=serializers.IntegerField(), required=False, default=list, write_only=True
    )
    item_count = serializers.IntegerField(read_only=True, required=False)


def _person(view):
    if isinstance(view.request.user, KeyPrincipal):
        raise Forbidden("labels come from people: sign in", code="person_required")
    return view.request.user


class AnnotationQueueListApi(TenantApi):
    actions = {"GET": Action.ANNOTATION_VIEW, "POST": Action.ANNOTATION_MANAGE}

    @extend_schema(operation_id="annotation_queue_list", responses=QueueSerializer(many=True))
    def get(self, request):
        return self.paginated(selectors.annotation_queue_list(tenant=self.tenant), QueueSerializer)

    @extend_schema(
        operation_id="annotation_queue_create", request=QueueSerializer, responses={201: QueueSerializer}
    )
    def post(self, request):
        data = QueueSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        queue = services.annotation_queue_create(tenant=self.tenant, actor=self.actor, **data.validated_data)
        return Response(
            QueueSerializer(selectors.annotation_queue_list(tenant=self.tenant).get(pk=queue.pk)).data,
            status=201,
        )


class AnnotationQueueDetailApi(TenantApi):
    """The queue with progress, agreement (kappa/alpha), per-annotator stats and open disagreements."""

    actions = {"GET": Action.ANNOTATION_VIEW}

    @extend_schema(operation_id="annotation_queue_detail")
    def get(self, request, queue_id):
        queue = selectors.annotation_queue_get(tenant=self.tenant, queue_id=queue_id)
        return Response(
            {
                **QueueSerializer(selectors.annotation_queue_list(tenant=self.tenant).get(pk=queue.pk)).data,
                "progress": selectors.annotation_progress(queue=queue),
                "agreement": selectors.annotation_agreement(queue=queue),
                "annotators": selectors.annotation_annotator_stats(queue=queue),
                "disagreements": [
                    {
                        "item_id": item.pk,
                        "trajectory_id": str(item.trajectory_id),
                        "values": {
                            label.annotator.get_username(): label.value for label in item.labels.all()
                        },
                    }
                    for item in selectors.annotation_disagreements(queue=queue)
                ],
            }
        )


class AnnotationQueueFillApi(TenantApi):
    """Takes in the trajectories that match the queue's filter now (the beat does it every
    AREAL_ANNOTATION_FILL_SECONDS); answers the queue's item count."""

    actions = {"POST": Action.ANNOTATION_MANAGE}

    @extend_schema(operation_id="annotation_queue_fill", request=None)
    def post(self, request, queue_id):
        queue = selectors.annotation_queue_get(tenant=self.tenant, queue_id=queue_id)
        return Response({"queue_id": queue.pk, "item_count": services.annotation_queue_fill(queue=queue)})


class AnnotationNextItemApi(TenantApi):
    """The next item for the signed-in annotator (never one they labelled or skipped); 204 when done."""

    actions = {"GET": Action.ANNOTATION_LABEL}

    @extend_schema(operation_id="annotation_next_item")
    def get(self, request, queue_id):
        user = _person(self)
        queue = selectors.annotation_queue_get(tenant=self.tenant, queue_id=queue_id)
        if not selectors.is_assigned(queue=queue, user=user):
            raise Forbidden("you are not assigned to this annotation queue", code="not_assigned")
        item = selectors.annotation_next_item(queue=queue, user=user)
        if item is None:
            return Response(status=204)
        return Response(
            {
                "item_id": item.pk,
                "trajectory_id": str(item.trajectory_id),
                "progress": selectors.annotation_progress(queue=queue, user=user),
            }
        )


class AnnotationLabelApi(TenantApi):
    actions = {"POST": Action.ANNOTATION_LABEL}
    error_statuses = {410, 422}  # a reward out of its spec; a session past its late-reward window

    class InputSerializer(serializers.Serializer):
        value = serializers.FloatField(required=False, allow_null=True)
        label = serializers.CharField(required=False, allow_blank=True, default="", max_length=200)
        step_id = serializers.UUIDField(required=False, allow_null=True)
        comment = serializers.CharField(required=False, allow_blank=True, default="", max_length=5000)
        correction = serializers.CharField(required=False, allow_blank=True, default="", max_length=20000)

    @extend_schema(operation_id="annotation_label", request=InputSerializer)
    def post(self, request, item_id):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        label = services.annotation_label_submit(
            tenant=self.tenant, actor=self.actor, user=_person(self), item_id=item_id, **data.validated_data
        )
        return Response(
            {
                "label_id": label.pk,
                "reward_id": str(label.reward_id),
                "value": label.value,
                "target": label.target,
            },
            status=201,
        )


class AnnotationSkipApi(TenantApi):
    actions = {"POST": Action.ANNOTATION_LABEL}

    @extend_schema(operation_id="annotation_skip", request=None)
    def post(self, request, item_id):
        services.annotation_skip(tenant=self.tenant, user=_person(self), item_id=item_id)
        return Response({"skipped": item_id}, status=201)


class AnnotationResolveApi(TenantApi):
    """A reviewer settles a disagreement with the value that counts (an audited override reward)."""

    actions = {"POST": Action.TRAJECTORY_REVIEW}
    error_statuses = {410, 422}  # a reward out of its spec; a session past its late-reward window

    class InputSerializer(serializers.Serializer):
        value = serializers.FloatField(required=False, allow_null=True)
        label = serializers.CharField(required=False, allow_blank=True, default="")
        reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)

    @extend_schema(operation_id="annotation_resolve", request=InputSerializer)
    def post(self, request, item_id):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        item = services.annotation_resolve(
            tenant=self.tenant, actor=self.actor, item_id=item_id, **data.validated_data
        )
        return Response(
            {"item_id": item.pk, "resolved_value": item.resolved_value, "resolved_by": item.resolved_by}
        )


class AnnotationExportApi(TenantApi):
    """Every label of the queue as JSON Lines."""

    actions = {"GET": Action.ANNOTATION_VIEW}

    @extend_schema(operation_id="annotation_export", responses={(200, "application/x-ndjson"): bytes})
    def get(self, request, queue_id):
        queue = selectors.annotation_queue_get(tenant=self.tenant, queue_id=queue_id)
        lines = (json.dumps(row) + "\n" for row in selectors.annotation_label_rows(queue=queue))
        response = StreamingHttpResponse(lines, content_type="application/x-ndjson")
        response["Content-Disposition"] = f'attachment; filename="{self.tenant.slug}-{queue.pk}-labels.jsonl"'
        return response
