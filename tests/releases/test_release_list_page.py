"""The console's releases list pages and filters on the server: a page of PAGE_SIZE rows with the pager's
links keeping the filter, a status and a model filter, an unknown value ignored, and another tenant's releases
never listed."""

import pytest

from apps.releases import views
from apps.releases.models import ReleaseStatus
from apps.tenants.permissions import Role
from tests.releases.helpers import release_at

pytestmark = pytest.mark.django_db


def _listed(response) -> list[int]:
    content = response.content.decode()
    return [int(chunk.split('"')[0]) for chunk in content.split('data-release="')[1:]]


def test_the_list_pages_and_filters_by_status_and_model(
    tenant, other_tenant, api_client, member, monkeypatch
):
    monkeypatch.setattr(views, "PAGE_SIZE", 2)
    rolled_back = [release_at(tenant, ReleaseStatus.ROLLED_BACK) for _ in range(3)]
    promoted = release_at(tenant, ReleaseStatus.PROMOTED)
    theirs = release_at(other_tenant, ReleaseStatus.ROLLED_BACK)
    client = api_client(user=member(Role.VIEWER))

    first = client.get("/releases/")
    assert first.status_code == 200
    assert _listed(first) == [promoted.pk, rolled_back[2].pk]
    assert "Page 1 of 2 (4 in all)" in first.content.decode()
    assert 'href="?page=2"' in first.content.decode()
    assert _listed(client.get("/releases/", {"page": 2})) == [rolled_back[1].pk, rolled_back[0].pk]

    filtered = client.get("/releases/", {"status": "rolled_back"})
    assert _listed(filtered) == [rolled_back[2].pk, rolled_back[1].pk]
    assert 'href="?status=rolled_back&page=2"' in filtered.content.decode()
    assert '<option value="rolled_back" selected>Rolled back</option>' in filtered.content.decode()
    assert _listed(client.get("/releases/", {"status": "rolled_back", "page": 2})) == [rolled_back[0].pk]
    assert _listed(client.get("/releases/", {"status": "promoted"})) == [promoted.pk]

    model = promoted.model
    assert _listed(client.get("/releases/", {"model": model, "status": "promoted"})) == [promoted.pk]
    nothing = client.get("/releases/", {"model": model, "status": "aborted"})
    assert _listed(nothing) == []
    assert "No release matches this filter." in nothing.content.decode()
    # An unknown status or model is no filter at all, not an error.
    assert client.get("/releases/", {"status": "bogus", "model": "nope"}).status_code == 200
    assert len(_listed(client.get("/releases/", {"status": "bogus"}))) == 2

    every_page = _listed(first) + _listed(client.get("/releases/", {"page": 2}))
    assert theirs.pk not in every_page
    assert theirs.pk not in _listed(client.get("/releases/", {"status": "rolled_back", "page": 2}))
