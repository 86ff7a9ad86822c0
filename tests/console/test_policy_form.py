"""The tenant policy's price table and PII patterns as rows of fields with field errors, not JSON textareas
(issue 29). A post without a table's rows leaves that table as it is."""

import pytest
from django.test import Client

from apps.audit.models import AuditEvent
from apps.tenants.models import TenantPolicy
from apps.tenants.permissions import Role

pytestmark = pytest.mark.django_db
BASE = {"consent_mode": "full", "retention_days": 90, "pii_mode": "redact"}


@pytest.fixture
def admin(member):
    client = Client()
    client.force_login(member(Role.ADMIN))
    return client


def _policy(tenant) -> TenantPolicy:
    return TenantPolicy.objects.get(tenant=tenant)


def test_the_tables_are_rows_of_fields_with_two_empty_rows(admin, tenant):
    TenantPolicy.objects.filter(tenant=tenant).update(
        price_table={"small": {"prompt_per_1k": 0.1, "completion_per_1k": 0.2}},
        pii_patterns=[{"name": "order-id", "regex": r"ORD-\d+"}],
    )
    page = admin.get("/settings/policy/").content.decode()
    assert "<textarea" not in page
    assert 'name="price-0-model" value="small"' in page
    assert 'name="price-2-model"' in page  # two empty rows to add a model
    assert 'name="price-3-model"' not in page
    assert 'name="pattern-0-regex" value="ORD-\\d+"' in page
    assert 'name="pattern-2-name"' in page


def test_rows_save_and_an_emptied_row_is_removed(admin, tenant):
    response = admin.post(
        "/settings/policy/",
        {
            **BASE,
            "price-0-model": "small",
            "price-0-prompt_per_1k": "0.1",
            "price-0-completion_per_1k": "0.25",
            "price-1-model": "large",
            "price-1-prompt_per_1k": "1",
            "price-1-completion_per_1k": "2",
            "pattern-0-name": "order-id",
            "pattern-0-regex": r"ORD-\d+",
        },
    )
    assert response.status_code == 302
    assert _policy(tenant).price_table == {
        "small": {"prompt_per_1k": 0.1, "completion_per_1k": 0.25},
        "large": {"prompt_per_1k": 1.0, "completion_per_1k": 2.0},
    }
    assert _policy(tenant).pii_patterns == [{"name": "order-id", "regex": r"ORD-\d+"}]
    admin.post(
        "/settings/policy/",
        {
            **BASE,
            "price-0-model": "",
            "price-1-model": "large",
            "price-1-prompt_per_1k": "1",
            "price-1-completion_per_1k": "2",
            "pattern-0-name": "",
        },
    )
    assert list(_policy(tenant).price_table) == ["large"]
    assert _policy(tenant).pii_patterns == []
    assert AuditEvent.objects.filter(tenant=tenant, verb="policy.update").count() == 2


def test_a_post_without_rows_keeps_the_tables(admin, tenant):
    TenantPolicy.objects.filter(tenant=tenant).update(
        price_table={"small": {"prompt_per_1k": 0.1, "completion_per_1k": 0.2}}
    )
    assert admin.post("/settings/policy/", {**BASE, "retention_days": 30}).status_code == 302
    assert _policy(tenant).price_table == {"small": {"prompt_per_1k": 0.1, "completion_per_1k": 0.2}}
    assert _policy(tenant).retention_days == 30


@pytest.mark.parametrize(
    ("rows", "field", "words"),
    [
        (
            {"price-0-model": "small", "price-0-prompt_per_1k": "0.1"},
            "price-0-completion_per_1k",
            "Give a price",
        ),
        (
            {"price-0-prompt_per_1k": "0.1", "price-0-completion_per_1k": "1"},
            "price-0-model",
            "Name the model",
        ),
        (
            {"price-0-model": "small", "price-0-prompt_per_1k": "-1", "price-0-completion_per_1k": "1"},
            "price-0-prompt_per_1k",
            "greater than or equal to 0",
        ),
        (
            {
                "price-0-model": "m",
                "price-0-prompt_per_1k": "1",
                "price-0-completion_per_1k": "1",
                "price-1-model": "m",
                "price-1-prompt_per_1k": "1",
                "price-1-completion_per_1k": "1",
            },
            "price-1-model",
            "has a row already",
        ),
        ({"pattern-0-name": "broken", "pattern-0-regex": "(unclosed"}, "pattern-0-regex", ""),
        ({"pattern-0-regex": "ORD-\\d+"}, "pattern-0-name", "needs both"),
        ({"pattern-0-name": "has space", "pattern-0-regex": "x+"}, "pattern-0-name", "letters"),
    ],
)
def test_a_bad_row_is_a_field_error_and_nothing_is_saved(admin, tenant, rows, field, words):
    response = admin.post("/settings/policy/", {**BASE, "retention_days": 7, **rows})
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert field in errors
    assert words in " ".join(errors[field])
    assert f'id="id_{field}"' in response.content.decode()
    assert _policy(tenant).retention_days == 90
    assert _policy(tenant).price_table == {}


def test_an_operator_reads_the_rows_but_cannot_change_them(member, tenant):
    client = Client()
    client.force_login(member(Role.OPERATOR))
    page = client.get("/settings/policy/").content.decode()
    assert 'name="price-0-model"' in page
    assert "disabled" in page.split('name="price-0-model"')[1].split(">")[0]
    assert client.post("/settings/policy/", {**BASE, "price-0-model": "x"}).status_code == 403
