"""Lists page and filter on the server (issue 29): the trajectory browser searches content, model version and
outcome; the audit log's verb filter offers the verbs the log holds; the training queue and the models list
page; saved filters are links. Another tenant's rows never show."""

import pytest
from django.test import Client

from apps.audit.services import Actor, audit_record
from apps.console.pages import PAGE_SIZE
from apps.tenants.permissions import Role
from tests.training.factories import ModelVersionFactory
from tests.trajectories.builders import gateway_step, imported, ingested

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer(member):
    client = Client()
    client.force_login(member(Role.VIEWER))
    return client


def _sessions(response) -> list[str]:
    assert response.status_code == 200
    return sorted(trajectory.session_id for trajectory in response.context["page"])


def _answer(text):
    return {
        "message": {"role": "assistant", "content": text, "tool_calls": None},
        "tool_calls": [],
        "text": text,
    }


@pytest.fixture
def searched(tenant, other_tenant):
    ingested(tenant, "s-paris", [gateway_step(tenant, "s-paris", action=_answer("Sunny in Zanzibar"))])
    ingested(
        tenant,
        "s-oslo",
        [
            gateway_step(
                tenant, "s-oslo", model_version="3", action=_answer("Snow in Tromsoe"), error="timeout"
            )
        ],
    )
    ingested(
        other_tenant,
        "s-their-paris",
        [gateway_step(other_tenant, "s-their-paris", model_version="3", action=_answer("Zanzibar again"))],
    )
    imported(tenant, "s-won", rewards=[1.0])
    imported(tenant, "s-lost", rewards=[0.0, 0.4])


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("?text=zanzibar", ["s-paris"]),  # the answer's words, case-insensitive; never another tenant's
        ("?text=Name+a+colour", ["s-oslo", "s-paris"]),  # the prompt's
        ("?model_version=v3", ["s-oslo"]),
        ("?model_version=3", ["s-oslo"]),
        ("?outcome=succeeded", ["s-won"]),
        ("?outcome=failed", ["s-lost"]),
        ("?outcome=errored", ["s-oslo"]),
        ("?outcome=unscored", ["s-oslo", "s-paris"]),
        ("?text=tromsoe&outcome=succeeded", []),
    ],
)
def test_trajectories_search_content_version_and_outcome(viewer, searched, query, expected):
    assert _sessions(viewer.get("/trajectories/" + query)) == expected


def test_saved_filters_are_links_and_a_filter_is_one(viewer, searched):
    page = viewer.get("/trajectories/?outcome=failed").content.decode()
    assert 'href="?outcome=succeeded"' in page
    assert 'href="?outcome=failed" aria-current="true"' in page
    assert "1 trajectory match" in page
    empty = viewer.get("/trajectories/?text=nowhere").content.decode()
    assert "No trajectories match this filter" in empty


def test_the_audit_verb_filter_offers_the_verbs_that_exist(member, tenant, other_tenant):
    viewer = Client()
    viewer.force_login(member(Role.ADMIN))  # the audit log is an admin's page
    for verb in ("release.start", "release.approve", "api_key.create"):
        audit_record(tenant=tenant, actor=Actor.system("test"), verb=verb)
    audit_record(tenant=other_tenant, actor=Actor.system("test"), verb="their.secret_verb")
    response = viewer.get("/audit/")
    choices = dict(response.context["form"].fields["verb"].choices)
    assert [value for value, _ in choices["Verbs"]] == [
        "api_key.create",
        "auth.sign_in",  # the admin's own sign-in
        "release.approve",
        "release.start",
    ]
    assert [value for value, _ in choices["Families"]] == ["api_key.", "auth.", "release."]
    assert "their.secret_verb" not in response.content.decode()
    events = viewer.get("/audit/?verb=release.").context["page"]
    assert sorted(event.verb for event in events) == ["release.approve", "release.start"]
    assert viewer.get("/audit/?verb=made.up").context["form"].errors  # only verbs that exist


def test_the_models_list_pages_and_filters(viewer, tenant, other_tenant):
    for number in range(PAGE_SIZE + 3):
        ModelVersionFactory(tenant=tenant, name="big-model", number=number)
    ModelVersionFactory(tenant=tenant, name="small-model", number=0, status="production")
    ModelVersionFactory(tenant=other_tenant, name="their-model", number=0)
    first = viewer.get("/models/")
    assert len(first.context["rows"]) == PAGE_SIZE
    assert first.context["names"] == ["big-model", "small-model"]
    assert len(viewer.get("/models/?page=2").context["rows"]) == 4
    production = viewer.get("/models/?status=production")
    assert [row["version"].name for row in production.context["rows"]] == ["small-model"]
    assert "their-model" not in first.content.decode()


def test_the_training_queue_pages_its_groups(viewer, tenant, monkeypatch):
    groups = [
        {"agent": f"agent-{index % 2}", "task_id": f"t-{index}", "group_id": "", "count": 1}
        for index in range(PAGE_SIZE + 10)
    ]
    monkeypatch.setattr("apps.qualification.selectors.training_queue", lambda *, tenant: groups)
    first = viewer.get("/training-queue/")
    assert len(first.context["page"]) == PAGE_SIZE
    assert first.context["waiting_total"] == PAGE_SIZE + 10  # of the whole queue, not of the page
    assert first.context["agents"] == ["agent-0", "agent-1"]
    only = viewer.get("/training-queue/?agent=agent-1")
    assert {row["agent"] for row in only.context["page"]} == {"agent-1"}
    assert 'href="?agent=agent-1" aria-current="true"' in only.content.decode()
