"""Model versions, training jobs, their metrics and online runs written straight to their tables: no audit
event, no worker (the role matrix compares audit counts around a request). Versions that should be audited,
or served from a real checkpoint, go through `model_version_register` (tests/training/helpers.py)."""

import uuid

import factory

from apps.training.models import (
    Algorithm,
    ModelVersion,
    OnlineRun,
    TrainingJob,
    TrainingMetric,
    VersionStatus,
)
from tests.tenants.factories import TenantFactory


class ModelVersionFactory(factory.django.DjangoModelFactory):
    """Version 0 (the base) of a model of its own; pass `name`, `number` and `parent` for a lineage."""

    class Meta:
        model = ModelVersion

    tenant = factory.SubFactory(TenantFactory)
    name = factory.Sequence(lambda number: f"model-{number}")
    number = 0
    checkpoint_path = factory.LazyAttribute(lambda version: f"/models/{version.name}/{version.number}")
    tokenizer_hash = "tok"


class TrainingJobFactory(factory.django.DjangoModelFactory):
    """A queued GRPO job from a production base version over a one-trajectory snapshot."""

    class Meta:
        model = TrainingJob

    tenant = factory.SubFactory(TenantFactory)
    base_version = factory.SubFactory(
        ModelVersionFactory, tenant=factory.SelfAttribute("..tenant"), status=VersionStatus.PRODUCTION
    )
    algorithm = Algorithm.GRPO
    config = factory.LazyAttribute(lambda job: {"algorithm": job.algorithm})
    total_steps = 5
    dataset_snapshot = factory.LazyFunction(
        lambda: {"trajectory_ids": [str(uuid.uuid4())], "content_hash": "h", "filters": {}}
    )


class TrainingMetricFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = TrainingMetric

    job = factory.SubFactory(TrainingJobFactory)
    tenant = factory.SelfAttribute("job.tenant")
    step = factory.LazyAttribute(lambda metric: metric.job.metric_rows.count() + 1)
    values = factory.Dict({"loss": 1.0})


class OnlineRunFactory(factory.django.DjangoModelFactory):
    """A running online run that has not yet published a version of its own."""

    class Meta:
        model = OnlineRun

    tenant = factory.SubFactory(TenantFactory)
    base_version = factory.SubFactory(ModelVersionFactory, tenant=factory.SelfAttribute("..tenant"))
    current_version = factory.SelfAttribute("base_version")
    model_name = factory.SelfAttribute("base_version.name")
