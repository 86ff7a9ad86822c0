"""get_in_tenant: one row of the tenant, or a 404 that looks the same whether the row is missing, another
tenant's, or named by a key of the wrong shape."""

import pytest

from apps.core.errors import NotFound
from apps.core.selectors import get_in_tenant
from apps.evaluation.models import EvalSuite
from apps.trajectories.selectors import TrajectoryNotFound

pytestmark = pytest.mark.django_db


@pytest.fixture
def suites(tenant, other_tenant):
    return (
        EvalSuite.objects.create(tenant=tenant, name="mine"),
        EvalSuite.objects.create(tenant=other_tenant, name="theirs"),
    )


def _refusal(**kwargs) -> tuple[type, str, str]:
    with pytest.raises(NotFound) as refused:
        get_in_tenant(**kwargs)
    return type(refused.value), refused.value.code, refused.value.message


def test_finds_the_tenants_row_from_a_model_or_a_queryset(tenant, suites):
    mine, _ = suites
    assert get_in_tenant(EvalSuite, tenant=tenant, pk=mine.pk, code="eval_suite_not_found") == mine
    found = get_in_tenant(
        EvalSuite.objects.only("name"), tenant=tenant, name="mine", code="eval_suite_not_found"
    )
    assert found == mine


def test_another_tenants_row_answers_like_a_missing_one_or_a_malformed_key(tenant, suites):
    _, theirs = suites
    missing = _refusal(source=EvalSuite, tenant=tenant, pk=theirs.pk + 1000, code="eval_suite_not_found")
    assert missing == (NotFound, "eval_suite_not_found", "no such eval suite in this tenant")
    assert _refusal(source=EvalSuite, tenant=tenant, pk=theirs.pk, code="eval_suite_not_found") == missing
    assert (
        _refusal(source=EvalSuite, tenant=tenant, pk="not-a-number", code="eval_suite_not_found") == missing
    )
    assert _refusal(source=EvalSuite, tenant=tenant, pk=None, code="eval_suite_not_found") == missing


def test_message_and_error_kind_can_be_given(tenant, suites):
    _, theirs = suites
    refusal = _refusal(
        source=EvalSuite.objects.all(),
        tenant=tenant,
        pk=theirs.pk,
        code="suite_gone",
        message="that suite is not here",
        error=TrajectoryNotFound,
    )
    assert refusal == (TrajectoryNotFound, "suite_gone", "that suite is not here")
