from datetime import UTC, datetime, time

from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from apps.core.errors import ValidationFailed
from apps.releases import analysis, approval, selectors, services
from apps.tenants.api import INTEGER_COLUMN_MAX, TenantApi
from apps.tenants.permissions import Action


def _version(version) -> dict | None:
    return None if version is None else {"id": version.pk, "number": version.number, "status": version.status}


class ReleaseOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    model = serializers.CharField()
    candidate = serializers.SerializerMethodField()
    baseline = serializers.SerializerMethodField()
    status = serializers.CharField()
    status_reason = serializers.CharField()
    stages = serializers.JSONField()
    stage_index = serializers.IntegerField()
    stage_percent = serializers.FloatField()
    guardrails = serializers.JSONField()
    failure_limit = serializers.IntegerField()
    inconclusive_limit = serializers.IntegerField()
    eval_runs = serializers.JSONField()
    last_verdict = serializers.CharField()
    started_by = serializers.CharField()
    approved_by = serializers.CharField()
    approvals = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)

    def get_approvals(self, release) -> list:
        """Who approved the promotion and when (two rows: a release no person started, under the two-person
        rule); the principals' ids stay in the audit log."""
        return [{"actor": row.get("actor"), "at": row.get("at")} for row in release.approvals or []]

    def get_candidate(self, release) -> dict:
        return _version(release.candidate)

    def get_baseline(self, release) -> dict:
        return _version(release.baseline)


class GuardrailSerializer(serializers.Serializer):
    metric = serializers.CharField()
    direction = serializers.CharField()
    threshold = serializers.FloatField()
    min_samples = serializers.IntegerField(default=30)
    judge = serializers.ChoiceField(choices=["point", "interval"], default="point")


class ReleaseListApi(TenantApi):
    actions = {"GET": Action.RELEASE_VIEW, "POST": Action.RELEASE_MANAGE}

    class InputSerializer(serializers.Serializer):
        candidate_id = serializers.IntegerField()
        baseline_id = serializers.IntegerField(required=False, allow_null=True, default=None)
        stages = serializers.ListField(
            child=serializers.FloatField(), required=False, default=None, allow_null=True
        )
        guardrails = GuardrailSerializer(many=True, required=False, default=list)
        eval_suite_ids = serializers.ListField(child=serializers.IntegerField(), required=False, default=list)
        failure_limit = serializers.IntegerField(min_value=0, max_value=INTEGER_COLUMN_MAX, default=0)
        inconclusive_limit = serializers.IntegerField(min_value=0, max_value=INTEGER_COLUMN_MAX, default=3)
        stage_min_seconds = serializers.IntegerField(min_value=0, max_value=INTEGER_COLUMN_MAX, default=0)

    @extend_schema(
        parameters=[OpenApiParameter("status", str), OpenApiParameter("model", str)],
        responses=ReleaseOutputSerializer(many=True),
    )
    def get(self, request):
        return self.paginated(
            selectors.release_list(
                tenant=self.tenant,
                status=request.query_params.get("status"),
                model=request.query_params.get("model"),
            ),
            ReleaseOutputSerializer,
        )

    @extend_schema(request=InputSerializer, responses={201: ReleaseOutputSerializer})
    def post(self, request):
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        data["guardrails"] = [dict(guardrail) for guardrail in data["guardrails"]]
        release = services.release_create(tenant=self.tenant, actor=self.actor, **data)
        return Response(ReleaseOutputSerializer(release).data, status=201)


def release_event_data(event) -> dict:
    return {
        "from": event.from_status,
        "to": event.to_status,
        "stage_index": event.stage_index,
        "actor": event.actor,
        "reason": event.reason,
        "at": event.at,
    }


def analysis_run_data(run) -> dict:
    return {
        "at": run.at,
        "stage_index": run.stage_index,
        "verdict": run.verdict,
        "decision": run.decision,
        "measurements": run.measurements,
    }


class ReleaseEventSerializer(serializers.BaseSerializer):
    """Read-only, for the house paginator: `release_event_data`."""

    def to_representation(self, instance):
        return release_event_data(instance)


class AnalysisRunSerializer(serializers.BaseSerializer):
    """Read-only, for the house paginator: `analysis_run_data`."""

    def to_representation(self, instance):
        return analysis_run_data(instance)


class ServingEventSerializer(serializers.BaseSerializer):
    """Read-only, for the house paginator: `serving_event_data`."""

    def to_representation(self, instance):
        return serving_event_data(instance)


# A release's detail embeds the newest of its events and analyses; the lists below page through them all.
DETAIL_ROWS = 100


def _newest(rows, count: int) -> list:
    """The newest `count` rows of an oldest-first queryset, oldest first."""
    return list(reversed(rows.order_by("-at", "-id")[:count]))


class ReleaseDetailApi(TenantApi):
    """A release with its newest DETAIL_ROWS events and analyses (oldest first; `events_count` and
    `analyses_count` say how many there are: `events/` and `analyses/` page through them all)."""

    actions = {"GET": Action.RELEASE_VIEW}

    @extend_schema(responses=ReleaseOutputSerializer)
    def get(self, request, release_id):
        release = selectors.release_get(tenant=self.tenant, release_id=release_id)
        data = ReleaseOutputSerializer(release).data
        events = selectors.release_events(tenant=self.tenant, release_id=release.pk)
        analyses = selectors.release_analyses(tenant=self.tenant, release_id=release.pk)
        data["events"] = [release_event_data(event) for event in _newest(events, DETAIL_ROWS)]
        data["events_count"] = events.count()
        data["analyses"] = [analysis_run_data(run) for run in _newest(analyses, DETAIL_ROWS)]
        data["analyses_count"] = analyses.count()
        return Response(data)


class ReleaseEventListApi(TenantApi):
    """Every status move of a release, oldest first, paginated (`?page=`, `?page_size=`)."""

    actions = {"GET": Action.RELEASE_VIEW}

    @extend_schema(responses=dict)
    def get(self, request, release_id):
        release = selectors.release_get(tenant=self.tenant, release_id=release_id)  # another tenant's: 404
        return self.paginated(
            selectors.release_events(tenant=self.tenant, release_id=release.pk), ReleaseEventSerializer
        )


class ReleaseAnalysisListApi(TenantApi):
    """Every analysis tick of a release with its measurements, oldest first, paginated."""

    actions = {"GET": Action.RELEASE_VIEW}

    @extend_schema(responses=dict)
    def get(self, request, release_id):
        release = selectors.release_get(tenant=self.tenant, release_id=release_id)  # another tenant's: 404
        return self.paginated(
            selectors.release_analyses(tenant=self.tenant, release_id=release.pk), AnalysisRunSerializer
        )


class _ReleaseActionApi(TenantApi):
    """POST with an optional reason; the body is: lock → service → serialize."""

    service = None

    class InputSerializer(serializers.Serializer):
        reason = serializers.CharField(max_length=300, required=False, default="", allow_blank=True)

    def act(self, release_id, reason):
        raise NotImplementedError

    @extend_schema(request=InputSerializer, responses=ReleaseOutputSerializer)
    def post(self, request, release_id):
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        release = self.act(release_id, body.validated_data["reason"])
        return Response(ReleaseOutputSerializer(release).data)


class ReleaseStartApi(_ReleaseActionApi):
    actions = {"POST": Action.RELEASE_MANAGE}

    def act(self, release_id, reason):
        return services.release_start(tenant=self.tenant, actor=self.actor, release_id=release_id)


class ReleaseApproveApi(_ReleaseActionApi):
    """Promotes a release awaiting approval: 409 otherwise; 403 for a non-operator or under the two-person rule
    when the approver started it. Under the rule a release no person started takes two people: the first
    approval answers 200 with the release still awaiting approval and the approval in `approvals`."""

    actions = {"POST": Action.RELEASE_APPROVE}

    def act(self, release_id, reason):
        return approval.release_approve(tenant=self.tenant, actor=self.actor, release_id=release_id)


class ReleaseRollbackApi(_ReleaseActionApi):
    actions = {"POST": Action.RELEASE_ROLLBACK}

    def act(self, release_id, reason):
        return services.release_rollback(
            tenant=self.tenant, actor=self.actor, release_id=release_id, reason=reason
        )


class ReleaseAbortApi(_ReleaseActionApi):
    actions = {"POST": Action.RELEASE_MANAGE}

    def act(self, release_id, reason):
        return services.release_abort(
            tenant=self.tenant, actor=self.actor, release_id=release_id, reason=reason
        )


class ReleaseResumeApi(_ReleaseActionApi):
    actions = {"POST": Action.RELEASE_MANAGE}

    def act(self, release_id, reason):
        return services.release_resume(tenant=self.tenant, actor=self.actor, release_id=release_id)


class ReleaseAnalyzeApi(_ReleaseActionApi):
    """Runs an analysis tick now instead of waiting for beat."""

    actions = {"POST": Action.RELEASE_MANAGE}

    def act(self, release_id, reason):
        return analysis.release_analyze(tenant=self.tenant, release_id=release_id)


def _moment(text: str):
    day = parse_date(text) if len(text) == 10 else None
    moment = datetime.combine(day, time.max) if day else parse_datetime(text)
    if moment is None:
        raise ValidationFailed("at must be an ISO 8601 date or date-time", fields={"at": ["invalid"]})
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment, UTC)
    return moment


def serving_event_data(event) -> dict:
    return {
        "model": event.model,
        "since": event.at,
        "stable": _version(event.stable),
        "canary": _version(event.canary),
        "canary_percent": event.canary_percent,
        "release": event.release_id,
        "reason": event.reason,
        "actor": event.actor,
    }


class ServingHistoryApi(TenantApi):
    """GET ?model=&at=: what served the tenant's model at that moment (a date means the end of that day, UTC);
    without `at`: the immutable history, oldest first, paginated (`?page=`, `?page_size=`; `count`, `next`,
    `previous` beside `results`)."""

    actions = {"GET": Action.SERVING_VIEW}

    @extend_schema(
        parameters=[
            OpenApiParameter("model", str),
            OpenApiParameter("at", str, description="a moment or a date (ISO 8601)"),
        ],
        responses=dict,
    )
    def get(self, request):
        model = request.query_params.get("model", "")
        at = request.query_params.get("at")
        if at:
            if not model:
                raise ValidationFailed("give ?model= with ?at=", fields={"model": ["required with at"]})
            moment = _moment(at)
            event = selectors.serving_at(tenant=self.tenant, model=model, moment=moment)
            return Response(
                {"model": model, "at": moment, "serving": serving_event_data(event) if event else None}
            )
        return self.paginated(
            selectors.serving_history(tenant=self.tenant, model=model or None), ServingEventSerializer
        )


def routing_state_data(state) -> dict:
    return {
        "model": state.model,
        "stable": _version(state.stable),
        "canary": _version(state.canary),
        "canary_percent": state.canary_percent,
        "release": state.release_id,
        "updated_at": state.updated_at,
    }


class RoutingListApi(TenantApi):
    """GET: what serves each of the tenant's models now (the routing the gateway follows). POST: makes a
    model's first production version serve (apps/releases/serving.py `production_set`): production status,
    the `production` alias, routing and a serving-history row. Refused with 409 and the reason when another
    version is production (change it through a release), a release is under way, or no backend serves it."""

    actions = {"GET": Action.SERVING_VIEW, "POST": Action.RELEASE_MANAGE}
    pagination_class = None  # one row per model

    class InputSerializer(serializers.Serializer):
        version_id = serializers.IntegerField(min_value=1, max_value=INTEGER_COLUMN_MAX)
        reason = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")

    @extend_schema(responses=dict)
    def get(self, request):
        return Response(
            {"results": [routing_state_data(state) for state in selectors.routing_states(tenant=self.tenant)]}
        )

    @extend_schema(request=InputSerializer, responses=dict)
    def post(self, request):
        from apps.releases.serving import production_set

        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        state = production_set(
            tenant=self.tenant,
            actor=self.actor,
            version_id=body.validated_data["version_id"],
            reason=body.validated_data["reason"],
        )
        return Response(routing_state_data(state))
