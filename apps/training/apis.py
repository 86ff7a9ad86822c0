"""REST API of training jobs, model versions (with lineage and publication) and aliases."""

from functools import partial

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.response import Response

from apps.tenants.api import INTEGER_COLUMN_MAX, TenantApi
from apps.tenants.permissions import Action
from apps.training import imports, jobs, registration, selectors, services
from apps.training.models import Algorithm
from workers.models.templates import MAX_TEMPLATE_CHARS


@extend_schema_serializer(component_name="ModelVersion")
class VersionOutputSerializer(serializers.Serializer):
    """A model version. `checkpoint_path` is where its directory lies on the installation's disk: shown to
    those who may publish (operators, admins, admin keys), null for viewers and annotators, whose work needs no
    server paths. Build it with `for_caller(view)`; without that context the path is null."""

    id = serializers.IntegerField()
    name = serializers.CharField()
    number = serializers.IntegerField()
    label = serializers.CharField()
    parent_id = serializers.IntegerField(allow_null=True)
    status = serializers.CharField()
    checkpoint_path = serializers.SerializerMethodField()
    tokenizer_hash = serializers.CharField()
    dataset_snapshot = serializers.JSONField()
    metrics = serializers.JSONField()
    description = serializers.CharField()
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()

    @classmethod
    def for_caller(cls, view: TenantApi):
        """The serializer as `view`'s caller may see it (called like the class: `(instance, many=...)`)."""
        return partial(cls, context={"show_checkpoint_path": view.can(Action.MODEL_VERSION_PUBLISH)})

    def get_checkpoint_path(self, version) -> str | None:
        return version.checkpoint_path if self.context.get("show_checkpoint_path") else None


@extend_schema_serializer(component_name="TrainingJob")
class JobOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    algorithm = serializers.CharField()
    status = serializers.CharField()
    base_version_id = serializers.IntegerField()
    produced_version_id = serializers.IntegerField(allow_null=True)
    config = serializers.JSONField()
    batch_size = serializers.IntegerField()
    total_steps = serializers.IntegerField()
    checkpoint_every = serializers.IntegerField()
    staleness_bound = serializers.IntegerField(allow_null=True)
    dataset = serializers.SerializerMethodField()
    sample_counts = serializers.JSONField()
    progress_step = serializers.IntegerField()
    progress_percent = serializers.IntegerField()
    eta_at = serializers.DateTimeField(allow_null=True)
    cancel_requested = serializers.BooleanField()
    attempts = serializers.IntegerField()
    error = serializers.CharField()
    description = serializers.CharField()
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)

    def get_dataset(self, job) -> dict:
        snapshot = job.dataset_snapshot or {}
        return {
            "trajectories": len(snapshot.get("trajectory_ids", [])),
            "content_hash": snapshot.get("content_hash"),
            "filters": snapshot.get("filters", {}),
        }


class TrainingJobListApi(TenantApi):
    actions = {"GET": Action.TRAINING_VIEW, "POST": Action.TRAINING_MANAGE}

    @extend_schema_serializer(component_name="TrainingJobCreate")
    class InputSerializer(serializers.Serializer):
        base_version_id = serializers.IntegerField()
        algorithm = serializers.ChoiceField(choices=Algorithm.choices)
        hyperparameters = serializers.DictField(
            required=False, default=dict, help_text="workers.engines.TrainConfig fields (learning_rate, ...)"
        )
        batch_size = serializers.IntegerField(min_value=1, max_value=4096, default=16)
        total_steps = serializers.IntegerField(min_value=1, max_value=100000, default=10)
        checkpoint_every = serializers.IntegerField(min_value=1, max_value=INTEGER_COLUMN_MAX, default=10)
        staleness_bound = serializers.IntegerField(
            min_value=0, max_value=INTEGER_COLUMN_MAX, required=False, allow_null=True, default=None
        )
        agent = serializers.CharField(required=False, allow_blank=True, default="")
        task_id = serializers.CharField(required=False, allow_blank=True, default="")
        max_trajectories = serializers.IntegerField(
            min_value=1, max_value=INTEGER_COLUMN_MAX, required=False, allow_null=True, default=None
        )
        description = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")

    @extend_schema(parameters=[OpenApiParameter("status", str)], responses=JobOutputSerializer(many=True))
    def get(self, request):
        return self.paginated(
            selectors.training_job_list(tenant=self.tenant, status=request.query_params.get("status")),
            JobOutputSerializer,
        )

    @extend_schema(request=InputSerializer, responses={201: JobOutputSerializer})
    def post(self, request):
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        data["agent"] = data["agent"] or None
        data["task_id"] = data["task_id"] or None
        job = jobs.training_job_create(tenant=self.tenant, actor=self.actor, **data)
        return Response(JobOutputSerializer(job).data, status=201)


class TrainingJobDetailApi(TenantApi):
    actions = {"GET": Action.TRAINING_VIEW}

    @extend_schema(responses=JobOutputSerializer)
    def get(self, request, job_id):
        job = selectors.training_job_get(tenant=self.tenant, job_id=job_id)
        data = JobOutputSerializer(job).data
        data["metrics"] = selectors.training_job_metrics(tenant=self.tenant, job_id=job.pk)
        data["logs"] = [
            {"at": line.at, "level": line.level, "message": line.message}
            for line in selectors.training_job_logs(tenant=self.tenant, job_id=job.pk)
        ]
        return Response(data)


class TrainingJobCancelApi(TenantApi):
    actions = {"POST": Action.TRAINING_MANAGE}

    @extend_schema(request=None, responses=JobOutputSerializer)
    def post(self, request, job_id):
        return Response(
            JobOutputSerializer(
                jobs.training_job_cancel(tenant=self.tenant, actor=self.actor, job_id=job_id)
            ).data
        )


class ModelVersionListApi(TenantApi):
    """GET: the tenant's versions. POST (admins): a model directory in the tenant's model inbox registered as
    a new candidate version: version 0 of a new model, or the next one of an existing model
    (apps/training/registration.py)."""

    actions = {"GET": Action.MODEL_VERSION_VIEW, "POST": Action.MODEL_REGISTER}

    @extend_schema_serializer(component_name="ModelVersionRegister")
    class InputSerializer(serializers.Serializer):
        name = serializers.CharField(max_length=100, help_text="the model name agents will ask for")
        directory = serializers.CharField(
            max_length=500, help_text="a directory in this tenant's model inbox, relative to the inbox"
        )
        description = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")

    @extend_schema(
        parameters=[OpenApiParameter("name", str), OpenApiParameter("status", str)],
        responses=VersionOutputSerializer(many=True),
    )
    def get(self, request):
        return self.paginated(
            selectors.model_version_list(
                tenant=self.tenant,
                name=request.query_params.get("name"),
                status=request.query_params.get("status"),
            ),
            VersionOutputSerializer.for_caller(self),
        )

    @extend_schema(request=InputSerializer, responses={201: VersionOutputSerializer})
    def post(self, request):
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        version = registration.model_directory_register(
            tenant=self.tenant,
            actor=self.actor,
            name=data["name"],
            source_dir=registration.model_inbox_resolve(tenant=self.tenant, directory=data["directory"]),
            description=data["description"],
        )
        return Response(VersionOutputSerializer.for_caller(self)(version).data, status=201)


class ModelVersionDetailApi(TenantApi):
    actions = {"GET": Action.MODEL_VERSION_VIEW}

    @extend_schema(responses=VersionOutputSerializer)
    def get(self, request, version_id):
        return Response(
            VersionOutputSerializer.for_caller(self)(
                selectors.model_version_get(tenant=self.tenant, version_id=version_id)
            ).data
        )


class ModelVersionLineageApi(TenantApi):
    """Every version of the version's model with its parent number, oldest first: the lineage tree, one page
    at a time (the house paginator's `?page=` and `?page_size=`; `count`, `next` and `previous` beside
    `versions`)."""

    actions = {"GET": Action.MODEL_VERSION_VIEW}

    def get(self, request, version_id):
        version = selectors.model_version_get(tenant=self.tenant, version_id=version_id)
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(
            selectors.model_lineage(tenant=self.tenant, name=version.name), request, view=self
        )
        return Response(
            {
                "name": version.name,
                "count": paginator.page.paginator.count,
                "next": paginator.get_next_link(),
                "previous": paginator.get_previous_link(),
                "versions": page,
            }
        )


class ModelVersionPublishApi(TenantApi):
    """Direct publication: loads the version's weights into this tenant's backends serving its model (see
    publication.py); once one took them the version serves (production, alias, routing, serving history:
    apps/releases/serving.py). 403 `two_person_rule` under the tenant's two-person rule (production then changes
    only through a release a second person approves), 409 during a release of the model, or for a version
    that cannot serve; a refusal loads nothing."""

    actions = {"POST": Action.MODEL_VERSION_PUBLISH}

    def post(self, request, version_id):
        from apps.releases.serving import version_publish_directly

        version = selectors.model_version_get(tenant=self.tenant, version_id=version_id)
        outcomes = version_publish_directly(tenant=self.tenant, actor=self.actor, version=version)
        return Response({"version": version.label, "backends": [vars(outcome) for outcome in outcomes]})


class ModelVersionChatTemplateApi(TenantApi):
    """GET: the chat template the version's directory carries. POST: a new candidate version, child of this
    one, serving `chat_template` over the same weights (apps/training/imports.py); the template is checked by
    rendering a probe conversation (tools, a tool call, a tool result, a generation prompt) first."""

    actions = {"GET": Action.MODEL_VERSION_VIEW, "POST": Action.TRAINING_MANAGE}

    @extend_schema_serializer(component_name="ModelVersionChatTemplate")
    class InputSerializer(serializers.Serializer):
        chat_template = serializers.CharField(max_length=MAX_TEMPLATE_CHARS, trim_whitespace=False)

    @extend_schema_serializer(component_name="ModelVersionChatTemplateOut")
    class OutputSerializer(serializers.Serializer):
        version = serializers.CharField()
        chat_template = serializers.CharField(allow_null=True)

    @extend_schema(responses=OutputSerializer)
    def get(self, request, version_id):
        version = selectors.model_version_get(tenant=self.tenant, version_id=version_id)
        template = imports.model_version_chat_template(tenant=self.tenant, version=version)
        return Response(self.OutputSerializer({"version": version.label, "chat_template": template}).data)

    @extend_schema(request=InputSerializer, responses={201: VersionOutputSerializer})
    def post(self, request, version_id):
        version = selectors.model_version_get(tenant=self.tenant, version_id=version_id)
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        created = imports.model_version_set_chat_template(
            tenant=self.tenant,
            actor=self.actor,
            version=version,
            chat_template=body.validated_data["chat_template"],
        )
        return Response(VersionOutputSerializer.for_caller(self)(created).data, status=201)


class ModelAliasListApi(TenantApi):
    actions = {"GET": Action.MODEL_VERSION_VIEW, "POST": Action.MODEL_ALIAS_MANAGE}
    pagination_class = None  # a tenant has a few aliases per model: one list, no pages

    class InputSerializer(serializers.Serializer):
        alias = serializers.SlugField(max_length=40)
        version_id = serializers.IntegerField()
        reason = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")

    @extend_schema_serializer(component_name="ModelAlias")
    class OutputSerializer(serializers.Serializer):
        name = serializers.CharField()
        alias = serializers.CharField()
        version_id = serializers.IntegerField()
        version = serializers.CharField()
        updated_at = serializers.DateTimeField()

    @extend_schema(
        parameters=[OpenApiParameter("name", str, description="only this model's aliases")],
        responses=OutputSerializer(many=True),
    )
    def get(self, request):
        rows = selectors.alias_list(tenant=self.tenant, name=request.query_params.get("name"))
        return Response(
            [
                {
                    "name": row.name,
                    "alias": row.alias,
                    "version_id": row.version_id,
                    "version": row.version.label,
                    "updated_at": row.updated_at,
                }
                for row in rows
            ]
        )

    @extend_schema(request=InputSerializer, responses={200: OutputSerializer})
    def post(self, request):
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        services.alias_check_movable(alias=body.validated_data["alias"])
        version = selectors.model_version_get(
            tenant=self.tenant, version_id=body.validated_data["version_id"]
        )
        row = services.alias_move(
            tenant=self.tenant,
            actor=self.actor,
            name=version.name,
            alias=body.validated_data["alias"],
            version=version,
            reason=body.validated_data["reason"],
        )
        return Response(
            {
                "name": row.name,
                "alias": row.alias,
                "version_id": row.version_id,
                "version": row.version.label,
                "updated_at": row.updated_at,
            }
        )
