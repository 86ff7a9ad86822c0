"""The evolution API: policy CRUD with field errors and optimistic edits, each role × action (a refusal changes
nothing), keys' scopes, approve / reject (twice, expired, two people), the signal series, clusters, decisions
and harness versions, and another tenant's rows answering exactly like missing ones."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.evolution.models import Decision, DecisionStatus, EvolutionPolicy
from apps.tenants.permissions import Role
from tests.evolution.factories import (
    DecisionFactory,
    EvolutionPolicyFactory,
    HarnessVersionFactory,
    SignalPointFactory,
    ToolFailureClusterFactory,
)

pytestmark = pytest.mark.django_db
BASE = "/api/v1/evolution"
SETTINGS = {
    "model": "policy-small",
    "mode": "propose",
    "signals": {"correction_rate": {"op": ">", "threshold": 0.2}},
    "update_kinds": ["weights", "harness"],
    "recipe": {"learning_rate": 1e-5, "samples_per_step": 8},
    "gate": {"environment": "weather", "cases": 20, "min_gain": 0.02},
    "release_plan": {"stages": [10, 100], "stage_min_seconds": 60},
}


def _audit_count(tenant) -> int:
    return AuditEvent.objects.filter(tenant=tenant).exclude(verb__startswith="auth.").count()


def test_policy_crud(tenant, api_client):
    client = api_client(["admin"])
    created = client.post(f"{BASE}/policies/", SETTINGS, format="json")
    assert created.status_code == 201, created.json()
    policy = created.json()
    assert policy["revision"] == 1
    assert policy["gate"] == SETTINGS["gate"]
    assert client.get(f"{BASE}/policies/").json()["results"][0]["id"] == policy["id"]
    assert client.get(f"{BASE}/policies/{policy['id']}/").json()["model"] == "policy-small"

    edited = client.patch(
        f"{BASE}/policies/{policy['id']}/", {"revision": 1, "window_seconds": 900}, format="json"
    )
    assert edited.status_code == 200
    assert edited.json()["revision"] == 2
    assert edited.json()["window_seconds"] == 900
    stale = client.patch(
        f"{BASE}/policies/{policy['id']}/", {"revision": 1, "mode": "observe"}, format="json"
    )
    assert stale.status_code == 409
    assert stale.json()["error"]["code"] == "policy_stale"
    assert client.get(f"{BASE}/policies/{policy['id']}/").json()["mode"] == "propose"

    assert client.delete(f"{BASE}/policies/{policy['id']}/?revision=2").status_code == 204
    assert not EvolutionPolicy.objects.exists()
    verbs = list(
        AuditEvent.objects.filter(verb__startswith="evolution_policy.")
        .order_by("sequence")
        .values_list("verb", flat=True)
    )
    assert verbs == ["evolution_policy.create", "evolution_policy.update", "evolution_policy.delete"]


def test_bad_input_answers_400_in_the_house_shape_with_fields(tenant, api_client):
    client = api_client(["admin"])
    response = client.post(
        f"{BASE}/policies/",
        {**SETTINGS, "window_seconds": 30, "signals": {"mood": {"op": ">", "threshold": 1}}},
        format="json",
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_policy"
    assert error["type"]
    assert set(error["fields"]) == {"window_seconds", "signals.mood"}
    unknown = client.post(f"{BASE}/policies/", {**SETTINGS, "owner": "me"}, format="json")
    assert unknown.status_code == 400
    assert unknown.json()["error"]["fields"] == {"owner": ["not a policy setting"]}
    wrong_type = client.post(f"{BASE}/policies/", {**SETTINGS, "window_seconds": "ten"}, format="json")
    assert wrong_type.status_code == 400
    assert "window_seconds" in wrong_type.json()["error"]["fields"]
    policy = EvolutionPolicyFactory(tenant=tenant)
    no_revision = client.patch(f"{BASE}/policies/{policy.pk}/", {"mode": "observe"}, format="json")
    assert no_revision.status_code == 400
    assert "revision" in no_revision.json()["error"]["fields"]
    assert not EvolutionPolicy.objects.exclude(pk=policy.pk).exists()
    duplicate = client.post(f"{BASE}/policies/", {**SETTINGS, "model": policy.model}, format="json")
    assert duplicate.status_code == 409
    assert duplicate.json()["error"]["code"] == "policy_exists"


# (role, may view, may manage policies, may approve)
ROLES = [
    (Role.ADMIN, True, True, True),
    (Role.OPERATOR, True, True, True),
    (Role.VIEWER, True, False, False),
    (Role.ANNOTATOR, False, False, False),
]


@pytest.mark.parametrize(("role", "view", "manage", "approve"), ROLES)
def test_each_role_and_action(tenant, api_client, member, role, view, manage, approve):
    policy = EvolutionPolicyFactory(tenant=tenant)
    decision = DecisionFactory(policy=policy)
    client = api_client(user=member(role))
    before = _audit_count(tenant)

    listing = client.get(f"{BASE}/decisions/")
    assert listing.status_code == (200 if view else 403)
    created = client.post(f"{BASE}/policies/", {**SETTINGS, "model": "another"}, format="json")
    assert created.status_code == (201 if manage else 403)
    edited = client.patch(
        f"{BASE}/policies/{policy.pk}/", {"revision": 1, "window_seconds": 900}, format="json"
    )
    assert edited.status_code == (200 if manage else 403)
    approved = client.post(f"{BASE}/decisions/{decision.pk}/approve/")
    assert approved.status_code == (200 if approve else 403)

    if not manage:
        assert _audit_count(tenant) == before
        assert EvolutionPolicy.objects.count() == 1
        policy.refresh_from_db()
        assert policy.revision == 1
    if not approve:
        decision.refresh_from_db()
        assert decision.status == DecisionStatus.PROPOSED
        assert decision.approvals == []
    if not view:
        assert listing.json()["error"]["code"] == "role_forbidden"


def test_keys_need_the_admin_scope(tenant, api_client):
    policy = EvolutionPolicyFactory(tenant=tenant)
    decision = DecisionFactory(policy=policy)
    reader = api_client(["trajectories:read"])
    assert reader.get(f"{BASE}/policies/").status_code == 403
    assert reader.post(f"{BASE}/decisions/{decision.pk}/approve/").json()["error"]["code"] == "scope_missing"
    admin = api_client(["admin"])
    approved = admin.post(f"{BASE}/decisions/{decision.pk}/approve/")
    assert approved.status_code == 200
    assert approved.json()["approvals"][0]["kind"] == "api_key"


def test_approve_twice_reject_and_expired(tenant, api_client, member):
    policy = EvolutionPolicyFactory(tenant=tenant)
    decision, rejected, expired = (
        DecisionFactory(policy=policy),
        DecisionFactory(policy=policy),
        DecisionFactory(policy=policy, expires_at=timezone.now() - timedelta(seconds=1)),
    )
    operator = api_client(user=member(Role.OPERATOR))
    first = operator.post(f"{BASE}/decisions/{decision.pk}/approve/")
    assert first.status_code == 200
    assert first.json()["status"] == "approved"
    again = operator.post(f"{BASE}/decisions/{decision.pk}/approve/")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "decision_closed"
    assert operator.post(f"{BASE}/decisions/{decision.pk}/reject/").status_code == 409

    response = operator.post(f"{BASE}/decisions/{rejected.pk}/reject/", {"reason": "not now"}, format="json")
    assert response.status_code == 200
    assert response.json()["status"] == "rejected"
    assert response.json()["outcome"] == "not now"
    assert operator.post(f"{BASE}/decisions/{rejected.pk}/approve/").status_code == 409

    late = operator.post(f"{BASE}/decisions/{expired.pk}/approve/")
    assert late.status_code == 410
    assert late.json()["error"]["code"] == "decision_expired"
    expired.refresh_from_db()
    assert expired.status == DecisionStatus.PROPOSED
    assert expired.approvals == []


def test_two_people_must_approve(tenant, api_client, member):
    decision = DecisionFactory(policy=EvolutionPolicyFactory(tenant=tenant), approvals_required=2)
    first, second = api_client(user=member(Role.OPERATOR)), api_client(user=member(Role.ADMIN))
    one = first.post(f"{BASE}/decisions/{decision.pk}/approve/")
    assert one.status_code == 200
    assert one.json()["status"] == "proposed"
    same = first.post(f"{BASE}/decisions/{decision.pk}/approve/")
    assert same.status_code == 409
    assert same.json()["error"]["code"] == "already_approved"
    two = second.post(f"{BASE}/decisions/{decision.pk}/approve/")
    assert two.json()["status"] == "approved"
    assert len(two.json()["approvals"]) == 2
    assert AuditEvent.objects.filter(verb="evolution_decision.approve").count() == 2


def test_two_approvals_are_two_people_not_two_principals(tenant, api_client, member):
    """A person's session and an API key they created are one person; a key no member created names no
    person, so it cannot be one of the two (issue 26, finding 5)."""
    from rest_framework.test import APIClient

    from apps.audit.services import Actor
    from apps.tenants.services import api_key_create

    def with_key(raw):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        return client

    decision = DecisionFactory(policy=EvolutionPolicyFactory(tenant=tenant), approvals_required=2)
    alice = api_client(user=member(Role.ADMIN))  # admins create keys
    created = alice.post("/api/v1/keys/", {"name": "alice-ci", "scopes": ["admin"]}, format="json")
    assert created.status_code == 201, created.content
    alice_key = with_key(created.json()["key"])
    _, nobodys = api_key_create(
        tenant=tenant, actor=Actor.system("cli"), name="from-the-cli", scopes=["admin"]
    )

    assert alice.post(f"{BASE}/decisions/{decision.pk}/approve/").json()["status"] == "proposed"
    before = _audit_count(tenant)
    same_person = alice_key.post(f"{BASE}/decisions/{decision.pk}/approve/")
    assert same_person.status_code == 409, same_person.content
    assert same_person.json()["error"]["code"] == "already_approved"
    no_person = with_key(nobodys).post(f"{BASE}/decisions/{decision.pk}/approve/")
    assert no_person.status_code == 403, no_person.content
    assert no_person.json()["error"]["code"] == "approval_needs_person"
    decision.refresh_from_db()
    assert decision.status == DecisionStatus.PROPOSED
    assert len(decision.approvals) == 1
    assert _audit_count(tenant) == before

    second = api_client(user=member(Role.OPERATOR)).post(f"{BASE}/decisions/{decision.pk}/approve/")
    assert second.json()["status"] == "approved"


def test_decisions_list_newest_first_filtered_and_paginated(
    tenant, api_client, django_assert_max_num_queries
):
    policy = EvolutionPolicyFactory(tenant=tenant)
    old = DecisionFactory(policy=policy, kind="train", status=DecisionStatus.SUCCEEDED)
    Decision.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(hours=1))
    harness = DecisionFactory(
        policy=policy, kind="update_harness", harness=HarnessVersionFactory(tenant=tenant, number=4)
    )
    for _ in range(3):
        DecisionFactory(policy=policy, kind="release")
    client = api_client(["admin"])
    with django_assert_max_num_queries(8):
        rows = client.get(f"{BASE}/decisions/").json()
    assert rows["count"] == 5
    assert rows["results"][-1]["id"] == old.pk
    assert [row["id"] for row in client.get(f"{BASE}/decisions/?kind=update_harness").json()["results"]] == [
        harness.pk
    ]
    assert client.get(f"{BASE}/decisions/?kind=update_harness").json()["results"][0]["harness"] == "h4"
    assert [row["id"] for row in client.get(f"{BASE}/decisions/?status=succeeded").json()["results"]] == [
        old.pk
    ]
    assert len(client.get(f"{BASE}/decisions/?page_size=2").json()["results"]) == 2
    assert client.get(f"{BASE}/decisions/?policy={policy.pk}").json()["count"] == 5
    bad = client.get(f"{BASE}/decisions/?status=maybe")
    assert bad.status_code == 400
    assert "status" in bad.json()["error"]["fields"]
    detail = client.get(f"{BASE}/decisions/{old.pk}/").json()
    assert detail["evidence"]["signals"][0]["name"] == "correction_rate"


def test_signal_series_and_clusters(tenant, api_client):
    policy = EvolutionPolicyFactory(tenant=tenant)
    now = timezone.now()
    for minutes, value in ((30, 0.1), (20, 0.2), (10, 0.3)):
        SignalPointFactory(
            policy=policy, name="correction_rate", value=value, at=now - timedelta(minutes=minutes)
        )
    SignalPointFactory(policy=policy, name="reward_mean", value=None, at=now)
    ToolFailureClusterFactory(policy=policy, count=2, signature="timeout")
    big = ToolFailureClusterFactory(policy=policy, count=9)
    client = api_client(["admin"])
    series = client.get(f"{BASE}/policies/{policy.pk}/signals/?name=correction_rate").json()
    assert [row["value"] for row in series["results"]] == [0.1, 0.2, 0.3]
    since = (now - timedelta(minutes=15)).isoformat()
    recent = client.get(f"{BASE}/policies/{policy.pk}/signals/", {"since": since}).json()["results"]
    assert [(row["name"], row["value"]) for row in recent] == [
        ("correction_rate", 0.3),
        ("reward_mean", None),
    ]
    assert client.get(f"{BASE}/policies/{policy.pk}/signals/?page_size=2").json()["count"] == 4
    bad = client.get(f"{BASE}/policies/{policy.pk}/signals/?since=yesterday")
    assert bad.status_code == 400
    clusters = client.get(f"{BASE}/clusters/?policy={policy.pk}").json()["results"]
    assert [row["id"] for row in clusters][0] == big.pk
    assert clusters[0]["tool"] == "get_weather"


def test_harness_versions(tenant, api_client):
    first = HarnessVersionFactory(tenant=tenant, number=1)
    second = HarnessVersionFactory(tenant=tenant, number=2, parent=first)
    HarnessVersionFactory(tenant=tenant, model="other", number=1)
    client = api_client(["admin"])
    rows = client.get(f"{BASE}/harness-versions/?model=policy-small").json()["results"]
    assert [row["label"] for row in rows] == ["h2", "h1"]
    detail = client.get(f"{BASE}/harness-versions/{second.pk}/").json()
    assert detail["parent"] == first.pk
    assert detail["tool_routing"]["get_weather"]["to"] == "get_weather_v2"


def test_another_tenants_rows_answer_like_missing_ones(tenant, other_tenant, api_client):
    theirs = EvolutionPolicyFactory(tenant=other_tenant)
    decision = DecisionFactory(policy=theirs)
    SignalPointFactory(policy=theirs)
    ToolFailureClusterFactory(policy=theirs)
    harness = HarnessVersionFactory(tenant=other_tenant)
    client = api_client(["admin"])
    before = _audit_count(other_tenant)
    for method, path, body in [
        ("get", f"{BASE}/policies/{theirs.pk}/", None),
        ("patch", f"{BASE}/policies/{theirs.pk}/", {"revision": 1, "mode": "observe"}),
        ("delete", f"{BASE}/policies/{theirs.pk}/", None),
        ("get", f"{BASE}/policies/{theirs.pk}/signals/", None),
        ("get", f"{BASE}/clusters/?policy={theirs.pk}", None),
        ("get", f"{BASE}/decisions/?policy={theirs.pk}", None),
        ("get", f"{BASE}/decisions/{decision.pk}/", None),
        ("post", f"{BASE}/decisions/{decision.pk}/approve/", None),
        ("post", f"{BASE}/decisions/{decision.pk}/reject/", {"reason": "x"}),
        ("get", f"{BASE}/harness-versions/{harness.pk}/", None),
    ]:
        response = (
            getattr(client, method)(path, body, format="json") if body else getattr(client, method)(path)
        )
        assert response.status_code == 404, (method, path, response.content)
    for path in ("policies/", "decisions/", "clusters/", "harness-versions/"):
        assert client.get(f"{BASE}/{path}").json()["results"] == []
    assert _audit_count(other_tenant) == before
    decision.refresh_from_db()
    theirs.refresh_from_db()
    assert decision.status == DecisionStatus.PROPOSED
    assert theirs.mode == "observe"
    assert theirs.revision == 1
