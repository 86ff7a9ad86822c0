"""REST API: the retention dry run (kept beside `apis.py` so retention stays one module to read)."""

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response

from apps.tenants.api import TenantApi
from apps.tenants.permissions import Action
from apps.trajectories.retention import retention_summary


class TrajectoryRetentionApi(TenantApi):
    """Admins: how many of the tenant's trajectories are past retention and will be deleted by the next
    purge (with their steps, rewards, reviews and annotations), and how many an unfinished training job
    holds until it ends. Reads only: nothing is deleted here."""

    actions = {"GET": Action.POLICY_EDIT}

    @extend_schema(
        operation_id="trajectory_retention",
        responses=inline_serializer(
            "TrajectoryRetention",
            {
                "retention_days": serializers.IntegerField(),
                "past_retention": serializers.IntegerField(),
                "held_by_training": serializers.IntegerField(),
                "to_purge": serializers.IntegerField(),
            },
        ),
    )
    def get(self, request):
        return Response(retention_summary(tenant=self.tenant))
