"""REST API of online runs (apps/training/online.py): list, start, detail (with the losses of the versions a
run registered), stop. Operators start and stop; everyone with training.view reads."""

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.response import Response

from apps.core.errors import ValidationFailed
from apps.tenants.api import INTEGER_COLUMN_MAX, TenantApi
from apps.tenants.permissions import Action
from apps.training import online, selectors


@extend_schema_serializer(component_name="OnlineRun")
class OnlineRunOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    model = serializers.CharField(source="model_name")
    status = serializers.CharField()
    base_version_id = serializers.IntegerField()
    base_version = serializers.CharField(source="base_version.label")
    current_version_id = serializers.IntegerField()
    current_version = serializers.CharField(source="current_version.label")
    samples_per_step = serializers.IntegerField()
    publish_every = serializers.IntegerField()
    staleness_bound = serializers.IntegerField()
    rollout_bound = serializers.IntegerField(
        allow_null=True, help_text="ρ: steps' worth of RL sessions let out ahead of the learner; null: η"
    )
    max_steps = serializers.IntegerField(allow_null=True)
    publish_to_backends = serializers.BooleanField(
        help_text="true: each registered version is loaded onto the model's backends and serves; false: "
        "releases decide what serves"
    )
    config = serializers.JSONField()
    steps = serializers.IntegerField()
    consumed = serializers.IntegerField()
    dropped_stale = serializers.IntegerField()
    stop_requested = serializers.BooleanField()
    error = serializers.CharField()
    created_by = serializers.CharField()
    started_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)


class OnlineRunListApi(TenantApi):
    """GET: the tenant's online runs, newest first. POST: starts one (one running run per tenant, else 409
    `online_run_exists`) from `base_version_id`, or from the production version of `model`."""

    actions = {"GET": Action.TRAINING_VIEW, "POST": Action.TRAINING_MANAGE}

    @extend_schema_serializer(component_name="OnlineRunStart")
    class InputSerializer(serializers.Serializer):
        base_version_id = serializers.IntegerField(required=False)
        model = serializers.CharField(
            max_length=200, required=False, help_text="instead of base_version_id: this model's production"
        )
        hyperparameters = serializers.DictField(
            required=False, default=dict, help_text="workers.engines.TrainConfig fields (learning_rate, ...)"
        )
        samples_per_step = serializers.IntegerField(min_value=1, max_value=4096, default=16)
        publish_every = serializers.IntegerField(min_value=1, max_value=INTEGER_COLUMN_MAX, default=1)
        staleness_bound = serializers.IntegerField(min_value=0, max_value=INTEGER_COLUMN_MAX, default=1)
        rollout_bound = serializers.IntegerField(
            min_value=0,
            max_value=INTEGER_COLUMN_MAX,
            required=False,
            allow_null=True,
            default=None,
            help_text="ρ: the gateway starts at most (ρ + steps + 1) · samples_per_step RL sessions; "
            "null: staleness_bound. Set it apart when publish_to_backends is off (production lags the learner)",
        )
        max_steps = serializers.IntegerField(
            min_value=1, max_value=INTEGER_COLUMN_MAX, required=False, allow_null=True, default=None
        )
        publish_to_backends = serializers.BooleanField(default=True)

        def validate(self, data):
            if ("base_version_id" in data) == ("model" in data):
                raise serializers.ValidationError(
                    {"base_version_id": ["give base_version_id or model, not both"]}
                    if "model" in data
                    else {"base_version_id": ["required (or model)"]}
                )
            return data

    @extend_schema(
        parameters=[OpenApiParameter("status", str)], responses=OnlineRunOutputSerializer(many=True)
    )
    def get(self, request):
        runs = online.online_run_list(tenant=self.tenant)
        if request.query_params.get("status"):
            runs = runs.filter(status=request.query_params["status"])
        return self.paginated(runs, OnlineRunOutputSerializer)

    @extend_schema(request=InputSerializer, responses={201: OnlineRunOutputSerializer})
    def post(self, request):
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        if "model" in data:
            base = selectors.alias_resolve(tenant=self.tenant, name=data.pop("model"), alias="production")
            if base is None:
                raise ValidationFailed(
                    "this tenant has no production version of that model",
                    fields={"model": ["no production version"]},
                    code="no_production",
                )
        else:
            base = selectors.model_version_get(tenant=self.tenant, version_id=data.pop("base_version_id"))
        run = online.online_run_start(tenant=self.tenant, actor=self.actor, base_version=base, **data)
        return Response(OnlineRunOutputSerializer(run).data, status=201)


class OnlineRunDetailApi(TenantApi):
    actions = {"GET": Action.TRAINING_VIEW}

    @extend_schema(responses=OnlineRunOutputSerializer)
    def get(self, request, run_id):
        run = online.online_run_get(tenant=self.tenant, run_id=run_id)
        data = OnlineRunOutputSerializer(run).data
        data["losses"] = online.online_run_losses(tenant=self.tenant, run_id=run.pk)
        return Response(data)


class OnlineRunStopApi(TenantApi):
    """Asks the run to stop after its current step (the worker ends it); a run already ended is answered as
    it is."""

    actions = {"POST": Action.TRAINING_MANAGE}

    @extend_schema(request=None, responses=OnlineRunOutputSerializer)
    def post(self, request, run_id):
        run = online.online_run_stop(tenant=self.tenant, actor=self.actor, run_id=run_id)
        return Response(OnlineRunOutputSerializer(run).data)
