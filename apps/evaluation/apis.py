from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from apps.core.errors import ValidationFailed
from apps.evaluation import bfcl, selectors, services
from apps.evaluation.models import CaseCategory, Scorer, SuiteKind
from apps.tenants.api import TenantApi
from apps.tenants.permissions import Action


class SuiteOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    kind = serializers.CharField()
    agent_name = serializers.CharField()
    description = serializers.CharField()
    created_at = serializers.DateTimeField()


class CaseOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    key = serializers.CharField()
    category = serializers.CharField()
    input_messages = serializers.JSONField()
    tools = serializers.JSONField()
    environment = serializers.JSONField()
    params = serializers.JSONField()
    scorer = serializers.CharField()
    scorer_config = serializers.JSONField()


class RunOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    suite = serializers.CharField(source="suite.name")
    model = serializers.CharField(source="model_version.name")
    version = serializers.IntegerField(source="model_version.number")
    version_id = serializers.IntegerField(source="model_version_id")
    status = serializers.CharField()
    summary = serializers.JSONField()
    error = serializers.CharField()
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)


class ResultOutputSerializer(serializers.Serializer):
    case = serializers.CharField(source="case.key")
    category = serializers.CharField(source="case.category")
    score = serializers.FloatField(allow_null=True)
    passed = serializers.BooleanField()
    label = serializers.CharField()
    output_text = serializers.CharField()
    tool_calls = serializers.JSONField()
    error = serializers.CharField()
    latency_ms = serializers.IntegerField()
    session_id = serializers.CharField()
    details = serializers.JSONField()


class EvalSuiteListApi(TenantApi):
    actions = {"GET": Action.EVAL_VIEW, "POST": Action.EVAL_MANAGE}

    class InputSerializer(serializers.Serializer):
        name = serializers.SlugField(max_length=80)
        kind = serializers.ChoiceField(choices=SuiteKind.choices, default=SuiteKind.REGRESSION)
        agent_name = serializers.CharField(max_length=200, required=False, default="", allow_blank=True)
        description = serializers.CharField(max_length=300, required=False, default="", allow_blank=True)

    @extend_schema(responses=SuiteOutputSerializer(many=True))
    def get(self, request):
        return self.paginated(selectors.eval_suite_list(tenant=self.tenant), SuiteOutputSerializer)

    @extend_schema(request=InputSerializer, responses={201: SuiteOutputSerializer})
    def post(self, request):
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        suite = services.eval_suite_create(tenant=self.tenant, actor=self.actor, **body.validated_data)
        return Response(SuiteOutputSerializer(suite).data, status=201)


class EvalBfclSuiteCreateApi(TenantApi):
    """POST: a suite of BFCL's held-out cases (apps/evaluation/bfcl.py), scored by BFCL's own checker."""

    actions = {"POST": Action.EVAL_MANAGE}

    class InputSerializer(serializers.Serializer):
        name = serializers.SlugField(max_length=80, default=bfcl.DEFAULT_NAME)
        categories = serializers.ListField(child=serializers.CharField(max_length=40), required=False)
        per_category = serializers.IntegerField(required=False, allow_null=True, default=None)
        case_ids = serializers.ListField(
            child=serializers.CharField(max_length=80), required=False, max_length=2000
        )
        agent_name = serializers.CharField(max_length=200, required=False, default="", allow_blank=True)
        max_tokens = serializers.IntegerField(required=False, default=bfcl.DEFAULT_MAX_TOKENS)
        max_steps_per_turn = serializers.IntegerField(required=False, default=5)

    class OutputSerializer(SuiteOutputSerializer):
        cases = serializers.SerializerMethodField()

        def get_cases(self, suite) -> dict[str, int]:
            return selectors.eval_case_counts(tenant=suite.tenant, suite_id=suite.pk)

    @extend_schema(request=InputSerializer, responses={201: OutputSerializer})
    def post(self, request):
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        suite = bfcl.bfcl_suite_create(tenant=self.tenant, actor=self.actor, **body.validated_data)
        return Response(self.OutputSerializer(suite).data, status=201)


class EvalCaseListApi(TenantApi):
    actions = {"GET": Action.EVAL_VIEW, "POST": Action.EVAL_MANAGE}

    class InputSerializer(serializers.Serializer):
        key = serializers.SlugField(max_length=80)
        category = serializers.ChoiceField(choices=CaseCategory.choices, default=CaseCategory.REGRESSION)
        input_messages = serializers.JSONField()
        tools = serializers.JSONField(required=False, default=list)
        environment = serializers.JSONField(required=False, default=dict)
        params = serializers.JSONField(required=False, default=dict)
        scorer = serializers.ChoiceField(choices=Scorer.choices)
        scorer_config = serializers.JSONField(required=False, default=dict)

    @extend_schema(responses=CaseOutputSerializer(many=True))
    def get(self, request, suite_id):
        selectors.eval_suite_get(tenant=self.tenant, suite_id=suite_id)
        return self.paginated(
            selectors.eval_case_list(tenant=self.tenant, suite_id=suite_id), CaseOutputSerializer
        )

    @extend_schema(request=InputSerializer, responses={201: CaseOutputSerializer})
    def post(self, request, suite_id):
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        case = services.eval_case_create(
            tenant=self.tenant, actor=self.actor, suite_id=suite_id, **body.validated_data
        )
        return Response(CaseOutputSerializer(case).data, status=201)


class EvalRunListApi(TenantApi):
    actions = {"GET": Action.EVAL_VIEW, "POST": Action.EVAL_MANAGE}

    class InputSerializer(serializers.Serializer):
        suite_id = serializers.IntegerField()
        version_id = serializers.IntegerField()

    @extend_schema(
        parameters=[
            OpenApiParameter("suite", int, description="only this suite's runs"),
            OpenApiParameter("version", int, description="only this model version's runs"),
        ],
        responses=RunOutputSerializer(many=True),
    )
    def get(self, request):
        filters = {}
        for field, name in (("suite_id", "suite"), ("version_id", "version")):
            value = request.query_params.get(name)
            if value is not None:
                if not value.isdigit():
                    raise ValidationFailed(f"{name} must be an id", fields={name: ["an integer id"]})
                filters[field] = int(value)
        return self.paginated(selectors.eval_run_list(tenant=self.tenant, **filters), RunOutputSerializer)

    @extend_schema(request=InputSerializer, responses={202: RunOutputSerializer})
    def post(self, request):
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        run = services.eval_run_start(tenant=self.tenant, actor=self.actor, **body.validated_data)
        return Response(RunOutputSerializer(run).data, status=202)


class EvalRunDetailApi(TenantApi):
    actions = {"GET": Action.EVAL_VIEW}

    @extend_schema(responses=RunOutputSerializer)
    def get(self, request, run_id):
        run = selectors.eval_run_get(tenant=self.tenant, run_id=run_id)
        data = RunOutputSerializer(run).data
        data["results"] = ResultOutputSerializer(
            selectors.eval_results(tenant=self.tenant, run_id=run.pk), many=True
        ).data
        return Response(data)


def comparison_data(candidate, baseline, comparison) -> dict:
    return {
        "candidate_run": candidate.pk,
        "baseline_run": baseline.pk,
        "metrics": {
            name: None
            if interval is None
            else {
                "difference": interval.difference,
                "low": interval.low,
                "high": interval.high,
                "candidate": interval.candidate_mean,
                "baseline": interval.baseline_mean,
                "samples": interval.samples,
                "significant": interval.significant,
            }
            for name, interval in comparison.metrics.items()
        },
        "flips": {
            "regressed": list(comparison.flips.regressed),
            "fixed": list(comparison.flips.fixed),
            "unchanged": comparison.flips.unchanged,
            "only_candidate": list(comparison.flips.only_candidate),
            "only_baseline": list(comparison.flips.only_baseline),
        },
    }


class EvalComparisonApi(TenantApi):
    """GET ?candidate=<run id>&baseline=<run id>: metric differences (candidate − baseline) with 95 % paired
    bootstrap intervals, and which cases flipped."""

    actions = {"GET": Action.EVAL_VIEW}

    @extend_schema(
        parameters=[
            OpenApiParameter("candidate", int, required=True, description="an eval run id"),
            OpenApiParameter("baseline", int, required=True, description="an eval run id"),
        ],
        responses=dict,
    )
    def get(self, request):
        try:
            candidate_id, baseline_id = (
                int(request.query_params["candidate"]),
                int(request.query_params["baseline"]),
            )
        except (KeyError, ValueError):
            raise ValidationFailed("give ?candidate=<run id>&baseline=<run id>") from None
        return Response(
            comparison_data(
                *selectors.eval_comparison(
                    tenant=self.tenant, candidate_run_id=candidate_id, baseline_run_id=baseline_id
                )
            )
        )
