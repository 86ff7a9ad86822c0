"""REST API: reward specs and rewards (list with filters, create, override, training reward, feedback)."""

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.response import Response

from apps.core.errors import Forbidden, NotFound
from apps.rewards import selectors, services
from apps.rewards.models import (
    Combination,
    EvaluatorKind,
    EvaluatorRunStatus,
    RewardKind,
    RewardSource,
    RewardTiming,
)
from apps.tenants.api import TenantApi
from apps.tenants.authentication import KeyPrincipal
from apps.tenants.permissions import Action
from apps.trajectories.selectors import trajectory_list


@extend_schema_serializer(component_name="RewardSpec")
class RewardSpecSerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    agent_name = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    name = serializers.CharField(max_length=120)
    kind = serializers.ChoiceField(choices=RewardKind.choices)
    minimum = serializers.FloatField(required=False, allow_null=True)
    maximum = serializers.FloatField(required=False, allow_null=True)
    categories = serializers.DictField(child=serializers.FloatField(), required=False)
    is_training_reward = serializers.BooleanField(required=False, default=False)
    combination = serializers.ChoiceField(
        choices=Combination.choices, required=False, default=Combination.PRIORITY
    )
    source_priority = serializers.ListField(
        child=serializers.ChoiceField(choices=RewardSource.choices), required=False
    )
    source_weights = serializers.DictField(child=serializers.FloatField(), required=False)
    description = serializers.CharField(required=False, allow_blank=True, default="")
    created_at = serializers.DateTimeField(read_only=True)


class RewardSpecListApi(TenantApi):
    actions = {"GET": Action.REWARD_VIEW, "POST": Action.REWARD_SPEC_MANAGE}

    @extend_schema(
        operation_id="reward_spec_list",
        responses=RewardSpecSerializer(many=True),
        parameters=[OpenApiParameter("agent", str, description="only this agent's specs")],
    )
    def get(self, request):
        agent = request.query_params.get("agent")
        return self.paginated(
            selectors.reward_spec_list(tenant=self.tenant, agent_name=agent), RewardSpecSerializer
        )

    @extend_schema(
        operation_id="reward_spec_create", request=RewardSpecSerializer, responses={201: RewardSpecSerializer}
    )
    def post(self, request):
        data = RewardSpecSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        spec = services.reward_spec_create(tenant=self.tenant, actor=self.actor, **data.validated_data)
        return Response(RewardSpecSerializer(spec).data, status=201)


class RewardSpecDetailApi(TenantApi):
    actions = {"GET": Action.REWARD_VIEW}

    @extend_schema(operation_id="reward_spec_detail", responses=RewardSpecSerializer)
    def get(self, request, spec_id):
        return Response(
            RewardSpecSerializer(selectors.reward_spec_get(tenant=self.tenant, spec_id=spec_id)).data
        )


@extend_schema_serializer(component_name="Reward")
class RewardOutputSerializer(serializers.Serializer):
    reward_id = serializers.UUIDField(source="id")
    trajectory_id = serializers.UUIDField()
    target = serializers.CharField()
    step_id = serializers.UUIDField(allow_null=True)
    value = serializers.FloatField()
    kind = serializers.CharField()
    label = serializers.CharField()
    spec = serializers.CharField(source="spec.name", allow_null=True, default=None)
    source = serializers.CharField()
    timing = serializers.CharField()
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    idempotency_key = serializers.CharField(allow_null=True)
    is_override = serializers.BooleanField()
    reason = serializers.CharField()
    evidence = serializers.DictField(help_text="What an evaluator based it on: an LLM judge's step id, model")


class RewardListApi(TenantApi):
    """GET: rewards newest first, filtered. POST: append one. People post as `annotator`; keys name `agent`
    (default), `user`, `environment` or `rule`; any other source is refused (403 `source_not_allowed`):
    `evaluator` is the evaluator workers' own. `override: true` (operators, with `reason`) beats every
    other source."""

    actions = {"GET": Action.REWARD_VIEW, "POST": Action.REWARD_WRITE}
    error_statuses = {410, 422}  # a reward out of its spec; a session past its late-reward window

    class FilterSerializer(serializers.Serializer):
        trajectory_id = serializers.UUIDField(required=False)
        step_id = serializers.UUIDField(required=False)
        source = serializers.ChoiceField(choices=RewardSource.choices, required=False)
        kind = serializers.ChoiceField(choices=RewardKind.choices, required=False)
        spec_id = serializers.IntegerField(required=False)
        created_after = serializers.DateTimeField(required=False)
        created_before = serializers.DateTimeField(required=False)
        is_override = serializers.BooleanField(required=False, allow_null=True, default=None)

    @extend_schema_serializer(component_name="RewardCreate")
    class InputSerializer(serializers.Serializer):
        trajectory_id = serializers.UUIDField()
        step_id = serializers.UUIDField(required=False, allow_null=True)
        value = serializers.FloatField(required=False, allow_null=True)
        label = serializers.CharField(required=False, allow_blank=True, default="", max_length=20000)
        kind = serializers.ChoiceField(choices=RewardKind.choices, required=False, allow_null=True)
        spec = serializers.CharField(required=False, allow_blank=True, default="", max_length=120)
        source = serializers.ChoiceField(choices=RewardSource.choices, required=False)
        timing = serializers.ChoiceField(
            choices=RewardTiming.choices, required=False, default=RewardTiming.DELAYED
        )
        idempotency_key = serializers.CharField(required=False, allow_null=True, max_length=200)
        override = serializers.BooleanField(required=False, default=False)
        reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)

    @extend_schema(
        operation_id="reward_list", parameters=[FilterSerializer], responses=RewardOutputSerializer(many=True)
    )
    def get(self, request):
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        return self.paginated(
            selectors.reward_list(tenant=self.tenant, **filters.validated_data), RewardOutputSerializer
        )

    @extend_schema(
        operation_id="reward_create", request=InputSerializer, responses={201: RewardOutputSerializer}
    )
    def post(self, request):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        if fields["override"] and not self.can(Action.REWARD_OVERRIDE):
            raise Forbidden("only operators may override a reward", code="role_forbidden")
        created_by = (
            request.user.prefix if isinstance(request.user, KeyPrincipal) else request.user.get_username()
        )
        reward, created = services.reward_create(
            tenant=self.tenant,
            actor=self.actor,
            source=fields.pop("source", None),
            created_by=created_by,
            spec_name=fields.pop("spec"),
            **fields,
        )
        return Response(RewardOutputSerializer(reward).data, status=201 if created else 200)


class RewardDetailApi(TenantApi):
    actions = {"GET": Action.REWARD_VIEW}

    @extend_schema(operation_id="reward_detail", responses=RewardOutputSerializer)
    def get(self, request, reward_id):
        return Response(
            RewardOutputSerializer(selectors.reward_get(tenant=self.tenant, reward_id=reward_id)).data
        )


class TrajectoryRewardSummaryApi(TenantApi):
    """The trajectory's training reward (by its agent's training spec) and end-user feedback counts."""

    actions = {"GET": Action.REWARD_VIEW}

    @extend_schema(operation_id="trajectory_reward_summary")
    def get(self, request, trajectory_id):
        trajectory = trajectory_list(tenant=self.tenant).filter(pk=trajectory_id).first()
        if trajectory is None:
            raise NotFound("no such trajectory in this tenant", code="trajectory_not_found")
        return Response(
            {
                "trajectory_id": str(trajectory.pk),
                "training_reward": selectors.training_reward(tenant=self.tenant, trajectory=trajectory),
                "feedback": selectors.feedback_summary(tenant=self.tenant, trajectory_id=trajectory.pk),
            }
        )


class RewardFeedbackApi(TenantApi):
    """Tenant-wide end-user feedback counts: thumbs up, thumbs down, corrections."""

    actions = {"GET": Action.REWARD_VIEW}

    @extend_schema(operation_id="reward_feedback")
    def get(self, request):
        return Response(selectors.feedback_summary(tenant=self.tenant))


class EvaluatorSerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    name = serializers.CharField(max_length=120)
    version = serializers.CharField(max_length=40, required=False, default="1")
    kind = serializers.ChoiceField(choices=EvaluatorKind.choices)
    config = serializers.DictField(
        required=False,
        default=dict,
        help_text="llm_judge: rubric, model, version, score {min, max, clamp, normalize} and/or verdicts "
        "{label: value}, max_tokens, timeout_s, retries, retry_backoff_s (apps/rewards/README.md)",
    )
    agent_name = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    spec = serializers.CharField(
        source="spec.name", required=False, allow_blank=True, default="", max_length=120
    )
    enabled = serializers.BooleanField(required=False, default=True)
    created_at = serializers.DateTimeField(read_only=True)


class EvaluatorListApi(TenantApi):
    """Evaluators run on workers when a trajectory ends (and on demand): rules, programs and LLM judges.
    An llm_judge's configuration problems are field errors named `config.<field>`."""

    actions = {"GET": Action.REWARD_VIEW, "POST": Action.EVALUATOR_MANAGE}
    error_statuses = {422}  # an unknown reward spec

    @extend_schema(operation_id="evaluator_list", responses=EvaluatorSerializer(many=True))
    def get(self, request):
        return self.paginated(selectors.evaluator_list(tenant=self.tenant), EvaluatorSerializer)

    @extend_schema(
        operation_id="evaluator_create", request=EvaluatorSerializer, responses={201: EvaluatorSerializer}
    )
    def post(self, request):
        data = EvaluatorSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        spec_name = (fields.pop("spec", None) or {}).get("name", "")
        evaluator = services.evaluator_create(
            tenant=self.tenant, actor=self.actor, spec_name=spec_name, **fields
        )
        return Response(EvaluatorSerializer(evaluator).data, status=201)


class EvaluatorDetailApi(TenantApi):
    """GET: one evaluator version. PATCH: edit it: `enabled` and `agent_name` always; `kind`, `config` and
    `spec` until it has stored a reward (then 409 `evaluator_version_used`: register a new version)."""

    actions = {"GET": Action.REWARD_VIEW, "PATCH": Action.EVALUATOR_MANAGE}
    error_statuses = {409, 422}

    @extend_schema_serializer(component_name="EvaluatorUpdate")
    class InputSerializer(serializers.Serializer):
        kind = serializers.ChoiceField(choices=EvaluatorKind.choices, required=False)
        config = serializers.DictField(required=False)
        agent_name = serializers.CharField(max_length=200, required=False, allow_blank=True)
        spec = serializers.CharField(required=False, allow_blank=True, max_length=120)
        enabled = serializers.BooleanField(required=False)

    @extend_schema(operation_id="evaluator_detail", responses=EvaluatorSerializer)
    def get(self, request, evaluator_id):
        evaluator = selectors.evaluator_get(tenant=self.tenant, evaluator_id=evaluator_id)
        return Response(EvaluatorSerializer(evaluator).data)

    @extend_schema(operation_id="evaluator_update", request=InputSerializer, responses=EvaluatorSerializer)
    def patch(self, request, evaluator_id):
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        changes = dict(body.validated_data)
        if "spec" in changes:
            changes["spec_name"] = changes.pop("spec")
        evaluator = services.evaluator_update(
            tenant=self.tenant, actor=self.actor, evaluator_id=evaluator_id, changes=changes
        )
        return Response(EvaluatorSerializer(evaluator).data)


class EvaluatorRunOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    evaluator_id = serializers.IntegerField()
    trajectory_id = serializers.UUIDField()
    status = serializers.CharField()
    attempts = serializers.IntegerField()
    reward_id = serializers.UUIDField(allow_null=True)
    error_code = serializers.CharField()
    error = serializers.CharField()
    raw_answer = serializers.CharField(
        help_text="The judge's answer when it could not be parsed (cut short)."
    )
    judge_session_id = serializers.CharField()
    judge_step_id = serializers.UUIDField(allow_null=True)
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)


class EvaluatorRunListApi(TenantApi):
    """The LLM-judge runs of one evaluator, newest first: succeeded (with the reward) or failed (the code,
    the reason and, for an answer that could not be parsed, the raw answer)."""

    actions = {"GET": Action.REWARD_VIEW}

    class FilterSerializer(serializers.Serializer):
        trajectory_id = serializers.UUIDField(required=False)
        status = serializers.ChoiceField(choices=EvaluatorRunStatus.choices, required=False)

    @extend_schema(
        operation_id="evaluator_run_list",
        parameters=[FilterSerializer],
        responses=EvaluatorRunOutputSerializer(many=True),
    )
    def get(self, request, evaluator_id):
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        evaluator = selectors.evaluator_get(tenant=self.tenant, evaluator_id=evaluator_id)
        return self.paginated(
            selectors.evaluator_run_list(
                tenant=self.tenant, evaluator_id=evaluator.pk, **filters.validated_data
            ),
            EvaluatorRunOutputSerializer,
        )


class EvaluatorRunApi(TenantApi):
    """Queues this evaluator over one trajectory (202); its reward appears in /rewards/?source=evaluator
    (an LLM judge's run, succeeded or failed, in /evaluators/<id>/runs/; a failed one is run again)."""

    actions = {"POST": Action.EVALUATOR_MANAGE}
    error_statuses = {410, 422}  # a reward out of its spec; a session past its late-reward window

    class InputSerializer(serializers.Serializer):
        trajectory_id = serializers.UUIDField()

    @extend_schema(operation_id="evaluator_run", request=InputSerializer)
    def post(self, request, evaluator_id):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        evaluator = selectors.evaluator_get(tenant=self.tenant, evaluator_id=evaluator_id)
        trajectory = (
            trajectory_list(tenant=self.tenant).filter(pk=data.validated_data["trajectory_id"]).first()
        )
        if trajectory is None:
            raise NotFound("no such trajectory in this tenant", code="trajectory_not_found")
        services.evaluator_run_enqueue(tenant=self.tenant, evaluator=evaluator, trajectory=trajectory)
        return Response(
            {"evaluator": str(evaluator), "trajectory_id": str(trajectory.pk), "queued": True}, status=202
        )
