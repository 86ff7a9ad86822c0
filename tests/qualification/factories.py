"""Gate verdicts, reviews and length limits written straight to their tables (the gates themselves run in
`qualification_evaluate`; reviews that should be audited go through `review_set`)."""

import factory

from apps.qualification.models import (
    Qualification,
    QualificationLimits,
    QualificationStatus,
    Review,
    ReviewStatus,
)
from tests.tenants.factories import TenantFactory
from tests.trajectories.factories import TrajectoryFactory


class QualificationFactory(factory.django.DjangoModelFactory):
    """A pending verdict; `qualified=True` for one the gates passed (as the training queue reads it)."""

    class Meta:
        model = Qualification

    class Params:
        qualified = factory.Trait(
            status=QualificationStatus.QUALIFIED, gate_status=QualificationStatus.QUALIFIED
        )

    trajectory = factory.SubFactory(TrajectoryFactory)
    tenant = factory.SelfAttribute("trajectory.tenant")
    content_hash = factory.Sequence(lambda number: f"content-{number}")


class ReviewFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Review

    trajectory = factory.SubFactory(TrajectoryFactory)
    tenant = factory.SelfAttribute("trajectory.tenant")
    status = ReviewStatus.APPROVED


class QualificationLimitsFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = QualificationLimits

    tenant = factory.SubFactory(TenantFactory)
