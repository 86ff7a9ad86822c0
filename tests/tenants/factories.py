import factory

from apps.core.models import User
from apps.tenants.models import Membership, Tenant, TenantPolicy
from apps.tenants.permissions import Role

PASSWORD = "correct horse battery staple"


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User
        skip_postgeneration_save = True

    username = factory.Sequence(lambda number: f"user{number}")
    email = factory.LazyAttribute(lambda user: f"{user.username}@example.test")
    password = factory.PostGenerationMethodCall("set_password", PASSWORD)

    @factory.post_generation
    def _save(user, create, extracted, **kwargs):
        if create:
            user.save()


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant
        django_get_or_create = ("slug",)
        skip_postgeneration_save = True

    slug = factory.Sequence(lambda number: f"tenant{number}")
    name = factory.LazyAttribute(lambda tenant: tenant.slug.title())
    policy = factory.RelatedFactory(
        "tests.tenants.factories.TenantPolicyFactory", factory_related_name="tenant"
    )


class TenantPolicyFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = TenantPolicy
        django_get_or_create = ("tenant",)


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    tenant = factory.SubFactory(TenantFactory)
    user = factory.SubFactory(UserFactory)
    role = Role.VIEWER
