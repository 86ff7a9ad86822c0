import json
import tempfile
from types import SimpleNamespace

from django.http import FileResponse, StreamingHttpResponse
from drf_spectacular.utils import (
    OpenApiParameter,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_serializer,
    inline_serializer,
)
from rest_framework import serializers
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.pagination import CursorPagination
from rest_framework.parsers import BaseParser
from rest_framework.response import Response

from apps.core.errors import ValidationFailed
from apps.core.parsers import JSONParser
from apps.core.schema import ErrorSerializer
from apps.loop.importing import trajectories_import
from apps.tenants.api import TenantApi
from apps.tenants.permissions import Action
from apps.trajectories import selectors, services
from apps.trajectories.lifecycle import trajectory_end_by_request
from apps.trajectories.serialize import trajectory_record
from workers.atdp.jsonl import read_jsonl
from workers.atdp.parquet import write_parquet

EXPORT_CHUNK = 200
MAX_IMPORT_BYTES = 64 * 1024 * 1024


class TrajectoryCursor(CursorPagination):
    ordering = ("-started_at", "-id")
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


@extend_schema_serializer(component_name="TrajectoryFilters")
class FilterSerializer(serializers.Serializer):
    session_id = serializers.CharField(required=False, max_length=200)
    agent = serializers.CharField(required=False, max_length=200)
    task_id = serializers.CharField(required=False, max_length=200)
    group_id = serializers.CharField(required=False, max_length=200)
    status = serializers.ChoiceField(choices=["open", "complete", "aborted"], required=False)
    purpose = serializers.ChoiceField(choices=["production", "eval", "replay", "annotation"], required=False)
    reward_min = serializers.FloatField(required=False)
    reward_max = serializers.FloatField(required=False)
    started_after = serializers.DateTimeField(required=False)
    started_before = serializers.DateTimeField(required=False)


def _filtered(view, request):
    filters = FilterSerializer(data=request.query_params)
    filters.is_valid(raise_exception=True)
    return selectors.trajectory_list(tenant=view.tenant, **filters.validated_data)


class TrajectoryListApi(TenantApi):
    """ATDP trajectories, newest first, cursor-paginated (`cursor`, `page_size` ≤ 200)."""

    actions = {"GET": Action.TRAJECTORY_VIEW}
    pagination_class = TrajectoryCursor

    @extend_schema(
        operation_id="trajectory_list",
        parameters=[FilterSerializer],
        responses=inline_serializer("AtdpTrajectory", {}),
    )
    def get(self, request):
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(
            selectors.trajectory_with_records(_filtered(self, request), tenant=self.tenant),
            request,
            view=self,
        )
        return paginator.get_paginated_response([trajectory_record(trajectory) for trajectory in page])


class TrajectoryDetailApi(TenantApi):
    actions = {"GET": Action.TRAJECTORY_VIEW}

    @extend_schema(operation_id="trajectory_detail", responses=inline_serializer("AtdpTrajectoryDetail", {}))
    def get(self, request, trajectory_id):
        return Response(
            trajectory_record(selectors.trajectory_get(tenant=self.tenant, trajectory_id=trajectory_id))
        )


def _records(queryset, *, tenant):
    """ATDP dicts, fetched in chunks with their steps and rewards: memory stays bounded by the chunk."""
    for trajectory in selectors.trajectory_with_records(queryset, tenant=tenant).iterator(
        chunk_size=EXPORT_CHUNK
    ):
        yield trajectory_record(trajectory)


class ExportFormatNegotiation(DefaultContentNegotiation):
    """`?format=` names the export's file format here; DRF would otherwise take it for a renderer name
    and answer 404 to `format=parquet`."""

    settings = SimpleNamespace(URL_FORMAT_OVERRIDE=None)


class TrajectoryExportApi(TenantApi):
    """Streams the filtered trajectories as ATDP JSON Lines (default) or Parquet (`format=parquet`)."""

    actions = {"GET": Action.TRAJECTORY_VIEW}
    content_negotiation_class = ExportFormatNegotiation

    @extend_schema(
        parameters=[FilterSerializer, OpenApiParameter("format", enum=["jsonl", "parquet"])],
        responses={(200, "application/x-ndjson"): bytes, (200, "application/vnd.apache.parquet"): bytes},
    )
    def get(self, request):
        filters = FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        queryset = selectors.trajectory_list(tenant=self.tenant, **filters.validated_data)
        kind = request.query_params.get("format", "jsonl")
        if kind not in ("jsonl", "parquet"):
            raise ValidationFailed("format must be jsonl or parquet", fields={"format": ["jsonl or parquet"]})
        services.trajectory_export_record(
            tenant=self.tenant, actor=self.actor, format=kind, filters=filters.validated_data
        )
        if kind == "parquet":
            spool = tempfile.TemporaryFile(suffix=".parquet")  # noqa: SIM115 (FileResponse closes it)
            write_parquet(_records(queryset, tenant=self.tenant), spool)
            spool.seek(0)
            return FileResponse(
                spool,
                as_attachment=True,
                filename=f"{self.tenant.slug}-trajectories.parquet",
                content_type="application/vnd.apache.parquet",
            )
        lines = (
            json.dumps(record, separators=(",", ":")) + "\n"
            for record in _records(queryset, tenant=self.tenant)
        )
        response = StreamingHttpResponse(lines, content_type="application/x-ndjson")
        response["Content-Disposition"] = f'attachment; filename="{self.tenant.slug}-trajectories.jsonl"'
        return response


class NdjsonParser(BaseParser):
    media_type = "application/x-ndjson"

    def parse(self, stream, media_type=None, parser_context=None):
        return stream.read(MAX_IMPORT_BYTES + 1)


def import_responses() -> dict:
    """200 with the report; 400 with the report when no line was accepted, or an error for a body that is
    not JSON Lines at all."""
    report = inline_serializer(
        "AtdpImportReport",
        {
            "accepted": serializers.IntegerField(),
            "trajectory_ids": serializers.ListField(child=serializers.UUIDField()),
            "stored": serializers.ListField(child=serializers.DictField()),
            "rejected": serializers.ListField(child=serializers.DictField()),
        },
    )
    refusal = PolymorphicProxySerializer(
        component_name="AtdpImportRefusal",
        serializers=[report, ErrorSerializer],
        resource_type_field_name=None,
    )
    return {200: report, 400: refusal}


class TrajectoryImportApi(TenantApi):
    """Imports ATDP JSON Lines (body `application/x-ndjson`). Each line is validated on its own: good lines
    are stored, bad ones are reported with their line number and failing field. A stored trajectory gets a
    fresh id (`trajectory_ids`, in line order); `stored` maps each line's own `trajectory_id` to it."""

    actions = {"POST": Action.TRAJECTORY_IMPORT}
    parser_classes = [NdjsonParser, JSONParser]

    @extend_schema(request={"application/x-ndjson": bytes}, responses=import_responses())
    def post(self, request):
        body = request.data
        if not isinstance(body, bytes | str):
            raise ValidationFailed("send ATDP JSON Lines with Content-Type: application/x-ndjson")
        if len(body) > MAX_IMPORT_BYTES:
            raise ValidationFailed(f"an import is at most {MAX_IMPORT_BYTES} bytes; split the file")
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        report = trajectories_import(
            tenant=self.tenant, actor=self.actor, lines=read_jsonl(text.splitlines())
        )
        stored = [
            {
                "line": entry.line,
                "trajectory_id": str(entry.trajectory.id),
                "source_trajectory_id": str(entry.trajectory.source_trajectory_id),
            }
            for entry in report.stored
        ]
        rejected = [
            {"line": entry.line, "field": entry.field, "message": entry.message} for entry in report.rejected
        ]
        return Response(
            {
                "accepted": len(stored),
                "trajectory_ids": [entry["trajectory_id"] for entry in stored],
                "stored": stored,
                "rejected": rejected,
            },
            status=200 if stored or not rejected else 400,
        )


class TrajectoryReplayApi(TenantApi):
    """Replays the trajectory's observations against `model` (optionally pinned to `model_version`) on a
    worker; answers 202 with the replay trajectory, recorded with purpose `replay` as its steps land."""

    actions = {"POST": Action.TRAJECTORY_REPLAY}

    class InputSerializer(serializers.Serializer):
        model = serializers.CharField(max_length=200)
        model_version = serializers.CharField(max_length=64, required=False, allow_blank=True, default="")

    class OutputSerializer(serializers.Serializer):
        trajectory_id = serializers.UUIDField(source="id")
        session_id = serializers.CharField()
        purpose = serializers.CharField()
        status = serializers.CharField()

    @extend_schema(
        operation_id="trajectory_replay", request=InputSerializer, responses={202: OutputSerializer}
    )
    def post(self, request, trajectory_id):
        from apps.loop.replay import trajectory_replay_start

        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        replay = trajectory_replay_start(
            tenant=self.tenant, trajectory_id=trajectory_id, actor=self.actor, **data.validated_data
        )
        return Response(self.OutputSerializer(replay).data, status=202)


class LifecycleSerializer(serializers.Serializer):
    """A trajectory's session lifecycle: not part of the ATDP record (ATDP has no place for why a session
    ended or for continuations), so neither the detail nor the export carries it."""

    trajectory_id = serializers.UUIDField(source="id")
    session_id = serializers.CharField()
    status = serializers.CharField()
    end_reason = serializers.CharField(
        allow_blank=True, help_text="agent, signal, api, idle, replay; blank: open or not recorded"
    )
    started_at = serializers.DateTimeField()
    ended_at = serializers.DateTimeField(allow_null=True)
    last_activity_at = serializers.DateTimeField()
    step_count = serializers.IntegerField()
    continues = serializers.UUIDField(
        source="continues_id",
        allow_null=True,
        help_text="the ended trajectory of the same session this one took the late steps of",
    )
    continued_by = serializers.UUIDField(
        source="continued_by_id",
        allow_null=True,
        help_text="the continuation this trajectory's late steps went to",
    )


class TrajectoryLifecycleApi(TenantApi):
    """How the trajectory's session stands: status, why it ended, its last activity and continuations."""

    actions = {"GET": Action.TRAJECTORY_VIEW}

    @extend_schema(operation_id="trajectory_lifecycle", responses=LifecycleSerializer)
    def get(self, request, trajectory_id):
        trajectory = selectors.trajectory_lifecycle_get(tenant=self.tenant, trajectory_id=trajectory_id)
        return Response(LifecycleSerializer(trajectory).data)


class TrajectoryEndApi(TenantApi):
    """Ends an open trajectory now (status `complete`, reason `api`), audited `trajectory.end`; its
    qualification runs as for any ended session. An ended trajectory answers 409 `trajectory_already_ended`
    and is left as it is. No body."""

    actions = {"POST": Action.TRAJECTORY_END}

    @extend_schema(
        operation_id="trajectory_end",
        request=None,
        responses={200: LifecycleSerializer, 409: ErrorSerializer},
    )
    def post(self, request, trajectory_id):
        trajectory_end_by_request(tenant=self.tenant, trajectory_id=trajectory_id, actor=self.actor)
        trajectory = selectors.trajectory_lifecycle_get(tenant=self.tenant, trajectory_id=trajectory_id)
        return Response(LifecycleSerializer(trajectory).data)
