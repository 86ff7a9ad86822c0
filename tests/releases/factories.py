"""Releases and routing written straight to their tables, without audit events (the role matrix compares
audit counts around a request). A release moved through its services is tests/releases/helpers.py's
`release_at`; release events, analyses and serving history are append-only records that only services write,
so they have no factory."""

import factory

from apps.releases.models import SERVING_STATUSES, Release, ReleaseStatus, RoutingState
from apps.training.models import VersionStatus
from tests.tenants.factories import TenantFactory
from tests.training.factories import ModelVersionFactory


class ReleaseFactory(factory.django.DjangoModelFactory):
    """A release of a model of its own: baseline v0 in production, candidate v1 trained from it. In a
    status that serves (canary, paused, awaiting approval) the release is at its first stage and the
    candidate is in canary."""

    class Meta:
        model = Release

    tenant = factory.SubFactory(TenantFactory)
    status = ReleaseStatus.DRAFT
    baseline = factory.SubFactory(
        ModelVersionFactory, tenant=factory.SelfAttribute("..tenant"), status=VersionStatus.PRODUCTION
    )
    candidate = factory.SubFactory(
        ModelVersionFactory,
        tenant=factory.SelfAttribute("..tenant"),
        name=factory.SelfAttribute("..baseline.name"),
        number=factory.LazyAttribute(lambda version: version.parent.number + 1),
        parent=factory.SelfAttribute("..baseline"),
        status=factory.LazyAttribute(
            lambda version: (
                VersionStatus.CANARY
                if version.factory_parent.status in SERVING_STATUSES
                else VersionStatus.CANDIDATE
            )
        ),
    )
    model = factory.SelfAttribute("baseline.name")
    stages = factory.List([5, 100])
    stage_index = factory.LazyAttribute(lambda release: 0 if release.status in SERVING_STATUSES else -1)


class RoutingStateFactory(factory.django.DjangoModelFactory):
    """The stable version serving its model alone (no canary)."""

    class Meta:
        model = RoutingState

    tenant = factory.SubFactory(TenantFactory)
    stable = factory.SubFactory(ModelVersionFactory, tenant=factory.SelfAttribute("..tenant"))
    model = factory.SelfAttribute("stable.name")
