"""The console's Reward specs page (apps/rewards/views.py `reward_specs`): the tenant's specs a page at a time,
and for operators and admins (the REST API's `reward_spec.manage`) a form that defines one through
`services.reward_spec_create`, the service's refusals beside their fields with nothing stored. Other roles see
the list only; another tenant's specs never show; an evaluator registered on the Evaluators page can name a
spec defined here."""

import json

import pytest
from django.test import Client

from apps.audit.models import AuditEvent
from apps.console.pages import PAGE_SIZE
from apps.rewards.models import Evaluator, RewardSpec
from apps.tenants.permissions import Role
from tests.rewards.factories import make_spec

pytestmark = pytest.mark.django_db

FORM = {
    "name": "quality",
    "agent_name": "helper",
    "kind": "numeric",
    "minimum": "0",
    "maximum": "1",
    "categories": "",
    "is_training_reward": "on",
    "combination": "priority",
    "source_priority": "annotator, evaluator, agent",
    "source_weights": "",
    "description": "How good the answer was.",
}


def _console(member, role):
    client = Client()
    client.force_login(member(role))
    return client


def _messages(response) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def test_an_operator_defines_specs_on_the_page_and_sees_only_the_tenants(member, tenant, other_tenant):
    make_spec(other_tenant, name="their-secret-spec")
    operator = _console(member, Role.OPERATOR)
    assert ">Reward specs</a>" in operator.get("/").content.decode()  # the navigation link
    page = operator.get("/reward-specs/")
    assert page.status_code == 200
    assert 'id="new-reward-spec"' in page.content.decode()
    assert "their-secret-spec" not in page.content.decode()
    assert "No reward specs yet" in page.content.decode()

    created = operator.post("/reward-specs/", FORM, follow=True)
    assert created.redirect_chain == [("/reward-specs/", 302)]
    assert _messages(created) == ["Defined the reward spec quality (helper)."]
    spec = RewardSpec.objects.get(tenant=tenant)
    assert (spec.name, spec.agent_name, spec.kind, spec.minimum, spec.maximum) == (
        "quality",
        "helper",
        "numeric",
        0.0,
        1.0,
    )
    assert spec.is_training_reward
    assert (spec.combination, spec.source_priority) == ("priority", ["annotator", "evaluator", "agent"])
    assert spec.description == "How good the answer was."
    assert AuditEvent.objects.filter(tenant=tenant, verb="reward_spec.create").count() == 1

    labels = {
        **FORM,
        "name": "verdict",
        "agent_name": "",
        "kind": "categorical",
        "minimum": "",
        "maximum": "",
        "categories": json.dumps({"good": 1, "bad": 0}),
        "is_training_reward": "",
        "combination": "weighted_sum",
        "source_priority": "",
        "source_weights": json.dumps({"user": 0.7, "evaluator": 0.3}),
    }
    assert operator.post("/reward-specs/", labels).status_code == 302
    verdict = RewardSpec.objects.get(tenant=tenant, name="verdict")
    assert (verdict.agent_name, verdict.categories) == ("", {"good": 1.0, "bad": 0.0})
    assert (verdict.combination, verdict.source_weights) == ("weighted_sum", {"user": 0.7, "evaluator": 0.3})
    assert not verdict.is_training_reward

    listing = operator.get("/reward-specs/").content.decode()
    assert f'data-spec="{spec.pk}"' in listing
    assert f'data-spec="{verdict.pk}"' in listing
    assert "every agent" in listing  # the tenant-wide spec's agent
    assert "annotator › evaluator › agent" in listing
    assert "their-secret-spec" not in listing
    assert RewardSpec.objects.filter(tenant=other_tenant).count() == 1


@pytest.mark.parametrize(
    ("changes", "field", "problem"),
    [
        ({"minimum": "2", "maximum": "1"}, "maximum", "must not be below minimum"),
        ({"categories": "{not json"}, "categories", "not valid JSON"),
        ({"categories": '{"good": 1}'}, "categories", "only categorical specs have categories"),
        ({"kind": "categorical", "minimum": "", "maximum": ""}, "categories", "a categorical spec needs"),
        ({"source_priority": "annotator, bogus"}, "source_priority", "unknown sources: bogus"),
        ({"combination": "weighted_sum"}, "source_weights", "a weighted sum needs {source: weight}"),
        (
            {"source_weights": '{"user": "high"}'},
            "source_weights",
            "&#x27;user&#x27;: the value must be a number",
        ),
        ({"kind": "critique", "minimum": "", "maximum": ""}, "is_training_reward", "a critique (free text)"),
        ({"name": ""}, "name", "This field is required."),
    ],
)
def test_a_refused_spec_shows_the_problem_beside_its_field_and_stores_nothing(
    member, tenant, changes, field, problem
):
    operator = _console(member, Role.ADMIN)
    response = operator.post("/reward-specs/", {**FORM, **changes})
    assert response.status_code == 400
    assert f'data-field="{field}">{problem}' in response.content.decode()
    assert 'id="new-reward-spec"' in response.content.decode()
    assert not RewardSpec.objects.filter(tenant=tenant).exists()
    assert not AuditEvent.objects.filter(tenant=tenant, verb="reward_spec.create").exists()


def test_conflicts_show_beside_the_name_and_the_training_reward(member, tenant, other_tenant):
    make_spec(other_tenant, name="quality", agent_name="helper")  # another tenant's: no conflict
    operator = _console(member, Role.OPERATOR)
    assert operator.post("/reward-specs/", FORM).status_code == 302
    again = operator.post("/reward-specs/", {**FORM, "is_training_reward": ""})
    assert again.status_code == 400
    assert (
        'data-field="name">a reward spec &#x27;quality&#x27; already exists for this agent'
        in again.content.decode()
    )
    second = operator.post("/reward-specs/", {**FORM, "name": "other"})
    assert second.status_code == 400
    assert 'data-field="is_training_reward">this agent already has a training reward spec' in (
        second.content.decode()
    )
    assert list(RewardSpec.objects.filter(tenant=tenant).values_list("name", flat=True)) == ["quality"]


@pytest.mark.parametrize("role", [Role.VIEWER, Role.ANNOTATOR])
def test_people_who_may_not_manage_specs_see_the_list_without_the_form(member, tenant, role):
    spec = make_spec(tenant, name="quality")
    client = _console(member, role)
    page = client.get("/reward-specs/")
    assert page.status_code == 200
    assert f'data-spec="{spec.pk}"' in page.content.decode()
    assert 'id="new-reward-spec"' not in page.content.decode()
    refused = client.post("/reward-specs/", {**FORM, "name": "sneaky", "is_training_reward": ""})
    assert refused.status_code == 403
    assert list(RewardSpec.objects.filter(tenant=tenant)) == [spec]


def test_the_list_is_paginated(member, tenant):
    for number in range(PAGE_SIZE + 1):
        make_spec(tenant, name=f"spec-{number:03d}", is_training_reward=False)
    client = _console(member, Role.VIEWER)
    first = client.get("/reward-specs/").content.decode()
    assert first.count('data-spec="') == PAGE_SIZE
    assert "Page 1 of 2" in first
    assert 'href="?page=2">Next →</a>' in first
    second = client.get("/reward-specs/", {"page": 2}).content.decode()
    assert second.count('data-spec="') == 1
    assert f"spec-{PAGE_SIZE:03d}" in second
    assert 'href="?page=1">← Previous</a>' in second


def test_an_evaluator_registered_on_its_page_names_a_spec_defined_here(member, tenant):
    operator = _console(member, Role.OPERATOR)
    assert operator.post("/reward-specs/", {**FORM, "agent_name": ""}).status_code == 302
    spec = RewardSpec.objects.get(tenant=tenant, name="quality")
    form = operator.get("/evaluators/").content.decode()
    assert '<option value="quality">quality</option>' in form
    registered = operator.post(
        "/evaluators/",
        {
            "name": "exact",
            "version": "1",
            "kind": "exact_match",
            "enabled": "on",
            "config": json.dumps({"expected": "42"}),
            "spec": "quality",
        },
    )
    assert registered.status_code == 302, registered.content.decode()[-2000:]
    assert Evaluator.objects.get(tenant=tenant, name="exact").spec == spec
