import factory

from apps.inference.models import BackendKind, BackendState, InferenceBackend
from tests.tenants.factories import TenantFactory


class BackendFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = InferenceBackend

    tenant = factory.SubFactory(TenantFactory)
    name = factory.Sequence(lambda number: f"replica-{number}")
    base_url = factory.Sequence(lambda number: f"http://127.0.0.1:{9100 + number}")
    kind = BackendKind.EMBEDDED
    served_model = "policy-small"
    model_version = "1"
    state = BackendState.UP
