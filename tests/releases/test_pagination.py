"""Serving history, release events and analyses, and a model's lineage page through the house paginator
(issue 26, Low: they were answered whole); another tenant's rows stay invisible."""

import pytest

from apps.releases.models import AnalysisRun, ReleaseEvent, ServingEvent
from apps.releases.routing_writes import routing_initialize
from tests.releases.helpers import MODEL, SYSTEM, register_versions, release_at
from tests.training.factories import ModelVersionFactory

pytestmark = pytest.mark.django_db


def test_the_serving_history_is_paginated_oldest_first(api_client, tenant, other_tenant):
    baseline, candidate = register_versions(tenant)
    for index in range(5):
        routing_initialize(
            tenant=tenant, actor=SYSTEM, version=(baseline, candidate)[index % 2], reason=f"r{index}"
        )
    theirs, _ = register_versions(other_tenant)
    routing_initialize(tenant=other_tenant, actor=SYSTEM, version=theirs, reason="theirs")
    client = api_client(["trajectories:read"])
    first = client.get("/api/v1/serving-history/", {"model": MODEL, "page_size": 2}).json()
    assert first["count"] == 5
    assert [row["reason"] for row in first["results"]] == ["r0", "r1"]
    last = client.get("/api/v1/serving-history/", {"model": MODEL, "page_size": 2, "page": 3}).json()
    assert [row["reason"] for row in last["results"]] == ["r4"]
    assert last["next"] is None
    everything = client.get("/api/v1/serving-history/").json()
    assert everything["count"] == 5  # the other tenant's row is not theirs to see
    assert ServingEvent.objects.count() == 6


def test_release_events_and_analyses_page_and_the_detail_embeds_only_the_newest(
    api_client, tenant, monkeypatch
):
    from apps.releases import apis

    monkeypatch.setattr(apis, "DETAIL_ROWS", 2)
    release = release_at(tenant, "canary", stage_index=0)
    for index in range(3):
        ReleaseEvent.objects.create(
            tenant=tenant,
            release=release,
            from_status="canary",
            to_status="canary",
            actor="t",
            reason=f"e{index}",
        )
        AnalysisRun.objects.create(
            tenant=tenant,
            release=release,
            stage_index=0,
            verdict="successful",
            decision="wait",
            measurements=[],
        )
    client = api_client(["trajectories:read"])
    detail = client.get(f"/api/v1/releases/{release.pk}/").json()
    assert [event["reason"] for event in detail["events"]] == ["e1", "e2"]
    assert (detail["events_count"], detail["analyses_count"], len(detail["analyses"])) == (3, 3, 2)
    events = client.get(f"/api/v1/releases/{release.pk}/events/", {"page_size": 2}).json()
    assert events["count"] == 3
    assert [event["reason"] for event in events["results"]] == ["e0", "e1"]
    analyses = client.get(f"/api/v1/releases/{release.pk}/analyses/", {"page_size": 2, "page": 2}).json()
    assert (analyses["count"], len(analyses["results"])) == (3, 1)


def test_another_tenants_release_lists_are_404(api_client, other_tenant):
    release = release_at(other_tenant, "canary", stage_index=0)
    client = api_client(["trajectories:read"])
    for suffix in ("events/", "analyses/"):
        response = client.get(f"/api/v1/releases/{release.pk}/{suffix}")
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "release_not_found"


def test_the_lineage_is_paginated(api_client, tenant):
    root = ModelVersionFactory(tenant=tenant, name="lineage-model", number=0)
    parent = root
    for number in range(1, 5):
        parent = ModelVersionFactory(tenant=tenant, name="lineage-model", number=number, parent=parent)
    client = api_client(["admin"])
    page = client.get(f"/api/v1/model-versions/{root.pk}/lineage/", {"page_size": 2, "page": 2}).json()
    assert page["name"] == "lineage-model"
    assert page["count"] == 5
    assert [(row["number"], row["parent"]) for row in page["versions"]] == [(2, 1), (3, 2)]
    assert page["next"] is not None
    assert page["previous"] is not None
