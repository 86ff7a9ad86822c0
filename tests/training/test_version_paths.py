"""A model version's checkpoint_path (where its directory lies on the installation's disk) through the REST API:
operators, admins and admin keys see it; viewers and annotators get null (issue 26, Low)."""

import pytest

from tests.training.factories import ModelVersionFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("role", "shown"), [("admin", True), ("operator", True), ("annotator", False), ("viewer", False)]
)
def test_the_checkpoint_path_is_shown_only_to_those_who_may_publish(api_client, member, tenant, role, shown):
    version = ModelVersionFactory(tenant=tenant, name="support-bot", number=0)
    client = api_client(user=member(role))
    listed = client.get("/api/v1/model-versions/")
    detail = client.get(f"/api/v1/model-versions/{version.pk}/")
    assert (listed.status_code, detail.status_code) == (200, 200)
    [row] = listed.json()["results"]
    expected = version.checkpoint_path if shown else None
    assert (row["checkpoint_path"], detail.json()["checkpoint_path"]) == (expected, expected)
    assert (row["label"], detail.json()["label"]) == ("support-bot@0", "support-bot@0")  # the rest is there
    assert (version.checkpoint_path in listed.content.decode()) is shown
    assert (version.checkpoint_path in detail.content.decode()) is shown


def test_an_admin_key_sees_the_checkpoint_path(api_client, tenant):
    version = ModelVersionFactory(tenant=tenant)
    body = api_client(["admin"]).get(f"/api/v1/model-versions/{version.pk}/").json()
    assert body["checkpoint_path"] == version.checkpoint_path
