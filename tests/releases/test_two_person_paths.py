"""Every path that changes what serves production obeys the tenant's two-person rule (issue 26, finding 2):
direct publication over REST and in the console is refused with 403 `two_person_rule` before anything is
loaded; an online run cannot start with `publish_to_backends` (REST and console); and a release the evolution
control plane started (no person started it) takes two different people, on the release's own page and
through the evolution decision, whatever the policy's approval mode. Backends are scripted stand-ins on
loopback."""

import pytest
from django.test import Client

from apps.audit.models import AuditEvent
from apps.audit.services import Actor
from apps.evolution.models import Decision, DecisionStatus
from apps.loop.control import evolution_tick
from apps.releases.models import Release, ReleaseStatus, RoutingState, ServingEvent
from apps.tenants.permissions import Role
from apps.training.models import OnlineRun, VersionStatus
from apps.training.selectors import alias_resolve
from tests.evolution.factories import AutoPolicyFactory
from tests.evolution.helpers import CALM
from tests.inference.factories import BackendFactory
from tests.network import scripted_http_server
from tests.releases.helpers import MODEL, SYSTEM, register_versions, release_at, version_over, weights

pytestmark = pytest.mark.django_db
LOADS = {("POST", "/admin/load"): (200, {}, {"ok": True})}


@pytest.fixture
def two_person(tenant):
    tenant.policy.two_person_promotion = True
    tenant.policy.save()
    return tenant


def _serving(tenant):
    """What serves the model: (statuses of every version, the alias's version, routing's stable version,
    serving-history rows)."""
    from apps.training.models import ModelVersion

    statuses = dict(ModelVersion.objects.filter(tenant=tenant).values_list("number", "status"))
    alias = alias_resolve(tenant=tenant, name=MODEL, alias="production")
    state = RoutingState.objects.filter(tenant=tenant, model=MODEL).first()
    return (
        statuses,
        alias.pk if alias else None,
        state.stable_id if state else None,
        ServingEvent.objects.filter(tenant=tenant).count(),
    )


def _production_with_a_candidate(tenant, tmp_path):
    baseline, candidate = register_versions(tenant)
    from apps.releases.routing_writes import routing_initialize

    routing_initialize(tenant=tenant, actor=SYSTEM, version=baseline)
    trained = version_over(tenant, weights(tmp_path / "v2"), parent=candidate)
    return baseline, trained


def test_direct_publication_over_rest_is_refused_under_the_rule_before_any_load(
    api_client, member, two_person, tmp_path
):
    tenant = two_person
    _, trained = _production_with_a_candidate(tenant, tmp_path)
    before = _serving(tenant)
    with scripted_http_server(LOADS) as (url, received):
        BackendFactory(tenant=tenant, name="slot-a", base_url=url, served_model=MODEL, model_version="0")
        for client in (api_client(user=member(Role.OPERATOR)), api_client(user=member(Role.ADMIN))):
            response = client.post(f"/api/v1/model-versions/{trained.pk}/publish/")
            assert response.status_code == 403, response.content
            assert response.json()["error"]["code"] == "two_person_rule"
            assert "release" in response.json()["error"]["message"]
    assert received == []  # nothing was loaded
    assert _serving(tenant) == before
    assert not AuditEvent.objects.filter(tenant=tenant, verb="model_version.publish").exists()


def test_the_console_offers_no_publication_under_the_rule_and_refuses_one_with_the_reason(
    member, two_person, tmp_path
):
    tenant = two_person
    _, trained = _production_with_a_candidate(tenant, tmp_path)
    before = _serving(tenant)
    client = Client()
    client.force_login(member(Role.OPERATOR))
    page = client.get("/models/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f'action="/models/versions/{trained.pk}/publish/"' not in html
    assert 'id="publish-two-person"' in html
    with scripted_http_server(LOADS) as (url, received):
        BackendFactory(tenant=tenant, base_url=url, served_model=MODEL, model_version="0")
        response = client.post(f"/models/versions/{trained.pk}/publish/", follow=True)
    assert received == []
    errors = [str(message) for message in response.context["messages"] if message.level_tag == "error"]
    assert len(errors) == 1
    assert "two-person rule" in errors[0]
    assert _serving(tenant) == before


def test_an_online_run_that_would_publish_cannot_start_under_the_rule(api_client, member, two_person):
    tenant = two_person
    register_versions(tenant)
    client = api_client(user=member(Role.OPERATOR))
    body = {"model": MODEL, "samples_per_step": 8, "publish_to_backends": True}
    refused = client.post("/api/v1/online-runs/", body, format="json")
    assert refused.status_code == 403, refused.content
    assert refused.json()["error"]["code"] == "two_person_rule"
    assert not OnlineRun.objects.exists()
    assert not AuditEvent.objects.filter(tenant=tenant, verb="online_run.start").exists()

    console = Client()
    console.force_login(member(Role.OPERATOR))
    form = console.get("/training/online/new/")
    assert form.status_code == 200
    assert 'name="publish_to_backends"' in form.content.decode()
    assert "checked" not in form.content.decode().split('name="publish_to_backends"')[1].split(">")[0]

    # A run that leaves serving to releases starts as before.
    started = client.post("/api/v1/online-runs/", {**body, "publish_to_backends": False}, format="json")
    assert started.status_code == 201, started.content


def test_a_release_no_person_started_takes_two_people_on_its_own_page(api_client, member, two_person):
    tenant = two_person
    policy_actor = Actor.system("evolution policy 1")
    release = release_at(tenant, ReleaseStatus.AWAITING_APPROVAL, stage_index=0, started_by=policy_actor)
    alice, bob = member(Role.OPERATOR), member(Role.ADMIN)
    alice_client = api_client(user=alice)

    first = alice_client.post(f"/api/v1/releases/{release.pk}/approve/", {}, format="json")
    assert first.status_code == 200, first.content
    assert first.json()["status"] == ReleaseStatus.AWAITING_APPROVAL
    assert [row["actor"] for row in first.json()["approvals"]] == [alice.username]
    release.refresh_from_db()
    assert release.status == ReleaseStatus.AWAITING_APPROVAL
    assert release.candidate.status == VersionStatus.CANARY

    again = alice_client.post(f"/api/v1/releases/{release.pk}/approve/", {}, format="json")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "already_approved"

    console = Client()
    console.force_login(bob)
    page = console.get(f"/releases/{release.pk}/")
    assert "a second person must approve" in page.content.decode()
    promoted = console.post(f"/releases/{release.pk}/approve/", follow=True)
    assert [str(message) for message in promoted.context["messages"]] == ["Promoted."]
    release.refresh_from_db()
    assert release.status == ReleaseStatus.PROMOTED
    assert release.approved_by == f"{alice.username}, {bob.username}"
    assert alias_resolve(tenant=tenant, name=MODEL, alias="production") == release.candidate


def test_a_control_plane_release_needs_two_people_whatever_the_policys_approval_mode(
    api_client, member, two_person
):
    tenant = two_person
    release = release_at(tenant, ReleaseStatus.AWAITING_APPROVAL, stage_index=0)
    policy = AutoPolicyFactory(tenant=tenant, model=MODEL, approval_mode="one_operator")
    Release.objects.filter(pk=release.pk).update(
        started_by_kind="system", started_by_id="", started_by=f"evolution policy {policy.pk}"
    )
    evolution_tick(tenant=tenant, policy=policy, signals=CALM)
    (decision,) = Decision.objects.filter(policy=policy, kind="promote")
    assert decision.approvals_required == 2

    alice, bob = member(Role.OPERATOR), member(Role.OPERATOR)
    one = api_client(user=alice).post(f"/api/v1/evolution/decisions/{decision.pk}/approve/")
    assert one.status_code == 200, one.content
    assert one.json()["status"] == DecisionStatus.PROPOSED
    evolution_tick(tenant=tenant, policy=policy, signals=CALM)
    release.refresh_from_db()
    assert release.status == ReleaseStatus.AWAITING_APPROVAL  # one person promoted nothing

    two = api_client(user=bob).post(f"/api/v1/evolution/decisions/{decision.pk}/approve/")
    assert two.json()["status"] == DecisionStatus.APPROVED
    evolution_tick(tenant=tenant, policy=policy, signals=CALM)
    release.refresh_from_db()
    assert release.status == ReleaseStatus.PROMOTED
    assert release.approved_by == f"{alice.username}, {bob.username}"
    decision.refresh_from_db()
    assert decision.status == DecisionStatus.SUCCEEDED


def test_automatic_promotion_under_the_rule_waits_for_two_people(tenant):
    tenant.policy.two_person_promotion = True
    tenant.policy.save()
    release = release_at(tenant, ReleaseStatus.AWAITING_APPROVAL, stage_index=0)
    policy = AutoPolicyFactory(tenant=tenant, model=MODEL)  # approval_mode automatic
    evolution_tick(tenant=tenant, policy=policy, signals=CALM)
    (decision,) = Decision.objects.filter(policy=policy, kind="promote")
    assert (decision.status, decision.approvals_required) == (DecisionStatus.PROPOSED, 2)
    release.refresh_from_db()
    assert release.status == ReleaseStatus.AWAITING_APPROVAL
