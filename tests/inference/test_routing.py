from collections import Counter

import pytest

from apps.inference.models import BackendState, SessionAffinity
from apps.inference.services import NoBackendAvailable, backend_for_session, session_pins_record
from tests.inference.factories import BackendFactory

pytestmark = pytest.mark.django_db


def route(tenant, session, **kwargs):
    return backend_for_session(tenant=tenant, served_model="policy-small", session_id=session, **kwargs)


def test_a_session_stays_on_its_backend(tenant):
    BackendFactory.create_batch(3, tenant=tenant)
    first = route(tenant, "s-1")
    assert all(route(tenant, "s-1") == first for _ in range(5))


def test_new_sessions_go_to_the_least_loaded_replica(tenant):
    replicas = BackendFactory.create_batch(3, tenant=tenant)
    counts = Counter(route(tenant, f"s-{number}").pk for number in range(30))
    assert counts == {replica.pk: 10 for replica in replicas}


def test_weight_sets_the_share(tenant):
    heavy = BackendFactory(tenant=tenant, weight=3)
    light = BackendFactory(tenant=tenant, weight=1)
    counts = Counter(route(tenant, f"s-{number}").pk for number in range(40))
    assert counts == {heavy.pk: 30, light.pk: 10}


def test_down_or_draining_backends_take_no_new_sessions(tenant):
    up = BackendFactory(tenant=tenant)
    BackendFactory(tenant=tenant, state=BackendState.DOWN)
    BackendFactory(tenant=tenant, state=BackendState.DRAINING)
    BackendFactory(tenant=tenant, weight=0)
    assert {route(tenant, f"s-{number}").pk for number in range(10)} == {up.pk}


def test_a_session_fails_over_when_its_backend_goes_down(tenant):
    first, second = BackendFactory.create_batch(2, tenant=tenant)
    pinned = route(tenant, "s-1")
    pinned.state = BackendState.DOWN
    pinned.save()
    moved = route(tenant, "s-1")
    assert moved != pinned
    assert moved in (first, second)
    assert SessionAffinity.objects.get(session_id="s-1").backend == moved


def test_version_pinning(tenant):
    BackendFactory(tenant=tenant, model_version="1")
    candidate = BackendFactory(tenant=tenant, model_version="2")
    assert route(tenant, "s-1", model_version="2") == candidate


def test_no_healthy_backend_is_a_clear_503(tenant):
    BackendFactory(tenant=tenant, state=BackendState.DOWN)
    with pytest.raises(NoBackendAvailable, match="no healthy backend serves 'policy-small'") as raised:
        route(tenant, "s-1")
    assert raised.value.status == 503


def test_another_tenants_backends_are_never_chosen(tenant, other_tenant):
    BackendFactory(tenant=other_tenant)
    with pytest.raises(NoBackendAvailable):
        route(tenant, "s-1")


def test_pins_of_fresh_sessions_are_recorded_once_and_an_existing_pin_wins(tenant):
    first, second = BackendFactory.create_batch(2, tenant=tenant)
    session_pins_record(
        pins=[(tenant.pk, "policy-small", "s-1", first.pk), (tenant.pk, "policy-small", "s-2", second.pk)]
    )
    session_pins_record(pins=[(tenant.pk, "policy-small", "s-1", second.pk)])  # s-1 is pinned already
    session_pins_record(pins=[])
    pins = {pin.session_id: pin for pin in SessionAffinity.objects.filter(tenant=tenant)}
    assert {session: pin.backend_id for session, pin in pins.items()} == {"s-1": first.pk, "s-2": second.pk}
    assert all(pin.created_at is not None and pin.last_used_at == pin.created_at for pin in pins.values())
    assert route(tenant, "s-1") == first  # the pin routes the session's next turn
