"""The REST base classes refuse subclasses that would skip their scope."""

import pytest

from apps.tenants.api import TenantApi, UserApi


@pytest.mark.parametrize("base", [TenantApi, UserApi])
@pytest.mark.parametrize("method", ["initial", "get_queryset"])
def test_a_subclass_cannot_override_the_scoping_methods(base, method):
    with pytest.raises(TypeError, match=f"overrides {method}"):
        type("BypassingApi", (base,), {method: lambda self, *args, **kwargs: None})
