"""The role × action matrix over the real endpoints: allowed requests succeed, denied ones get 403
and change nothing."""

import pytest

from apps.audit.models import AuditEvent
from apps.inference.models import InferenceBackend
from apps.tenants.models import ApiKey, Membership, TenantPolicy
from apps.tenants.permissions import PERMISSIONS, Action, Role, role_can
from tests.annotation.test_permissions import MINE as ANNOTATION_MATRIX_ACTIONS
from tests.tenants.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db
# The actions of rewards, qualification and annotation have their own matrix (tests/annotation), with the
# fixtures they need; every other action must have a representative request here.
MATRIX_ACTIONS = [action for action in Action if action not in ANNOTATION_MATRIX_ACTIONS]


def _snapshot(tenant):
    return (
        list(
            ApiKey.objects.filter(tenant=tenant).values_list("id", "revoked_at", "grace_until").order_by("id")
        ),
        list(Membership.objects.filter(tenant=tenant).values_list("id", "role").order_by("id")),
        TenantPolicy.objects.filter(tenant=tenant).values_list("retention_days", flat=True).get(),
        AuditEvent.objects.filter(tenant=tenant).count(),
        InferenceBackend.objects.filter(tenant=tenant).count(),
    )


def _replayable_trajectory(tenant):
    """A recorded trajectory with one model call, and a backend serving its model."""
    from apps.trajectories.models import trajectory_id_for
    from apps.trajectories.services import steps_ingest
    from tests.inference.factories import BackendFactory

    if not InferenceBackend.objects.filter(tenant=tenant, served_model="m").exists():
        BackendFactory(tenant=tenant, name="replay-target", served_model="m")
        steps_ingest(
            records=[
                {
                    "step_id": "8a3c0e2e-0a52-4c1b-9d51-6c7c1f0f3b11",
                    "tenant_id": tenant.pk,
                    "session_id": "recorded",
                    "endpoint": "chat",
                    "observation": {"messages": [{"role": "user", "content": "hi"}]},
                }
            ]
        )
    return trajectory_id_for(tenant_id=tenant.pk, session_id="recorded")


def _request(action, client, context):
    """One representative request per action."""
    tenant, victim_key, victim_member = context
    if action is Action.TENANT_VIEW:
        return client.get("/api/v1/tenants/")
    if action is Action.POLICY_VIEW:
        return client.get("/api/v1/policy/")
    if action is Action.POLICY_EDIT:
        return client.patch("/api/v1/policy/", {"retention_days": 11}, format="json")
    if action is Action.MEMBER_VIEW:
        return client.get("/api/v1/members/")
    if action is Action.MEMBER_MANAGE:
        return client.patch(f"/api/v1/members/{victim_member.pk}/", {"role": "operator"}, format="json")
    if action is Action.API_KEY_VIEW:
        return client.get("/api/v1/keys/")
    if action is Action.API_KEY_MANAGE:
        return client.post(f"/api/v1/keys/{victim_key.pk}/revoke/")
    if action is Action.AUDIT_VIEW:
        return client.get("/api/v1/audit/")
    if action is Action.TRAJECTORY_VIEW:
        return client.get("/api/v1/trajectories/")
    if action is Action.TRAJECTORY_IMPORT:
        return client.post("/api/v1/trajectories/import/", b"", content_type="application/x-ndjson")
    if action is Action.TRAJECTORY_REPLAY:
        return client.post(
            f"/api/v1/trajectories/{_replayable_trajectory(tenant)}/replay/", {"model": "m"}, format="json"
        )
    if action is Action.TRAJECTORY_END:
        from apps.trajectories.services import trajectory_open

        session = trajectory_open(tenant=tenant, session_id=f"to-end-{victim_member.pk}")
        return client.post(f"/api/v1/trajectories/{session.pk}/end/", format="json")
    if action is Action.BACKEND_VIEW:
        return client.get("/api/v1/backends/")
    if action is Action.BACKEND_MANAGE:
        return client.post(
            "/api/v1/backends/",
            {"name": "b", "base_url": "http://127.0.0.1:1", "kind": "vllm", "served_model": "m"},
            format="json",
        )
    if action is Action.BACKEND_CREDENTIAL_MANAGE:
        return client.post(
            "/api/v1/backends/",
            {
                "name": "hosted",
                "base_url": "http://127.0.0.1:1",
                "kind": "openai_compatible",
                "served_model": "m",
                "credential": "sk-matrix-credential",
            },
            format="json",
        )
    if action is Action.EVAL_VIEW:
        return client.get("/api/v1/eval/suites/")
    if action is Action.EVAL_MANAGE:
        return client.post("/api/v1/eval/suites/", {"name": "matrix-suite"}, format="json")
    if action is Action.RELEASE_VIEW:
        return client.get("/api/v1/releases/")
    if action is Action.RELEASE_MANAGE:
        from tests.releases.factories import ReleaseFactory

        draft = ReleaseFactory(tenant=tenant)
        draft.delete()
        return client.post(
            "/api/v1/releases/",
            {"candidate_id": draft.candidate_id, "baseline_id": draft.baseline_id},
            format="json",
        )
    if action is Action.RELEASE_APPROVE:
        from tests.releases.factories import ReleaseFactory

        awaiting = ReleaseFactory(tenant=tenant, status="awaiting_approval")
        return client.post(f"/api/v1/releases/{awaiting.pk}/approve/")
    if action is Action.RELEASE_ROLLBACK:
        from tests.releases.factories import ReleaseFactory

        canary = ReleaseFactory(tenant=tenant, status="canary")
        return client.post(f"/api/v1/releases/{canary.pk}/rollback/")
    if action is Action.SERVING_VIEW:
        return client.get("/api/v1/serving-history/")
    if action is Action.TRAINING_VIEW:
        return client.get("/api/v1/training-jobs/")
    if action is Action.TRAINING_MANAGE:
        from tests.training.factories import TrainingJobFactory

        return client.post(f"/api/v1/training-jobs/{TrainingJobFactory(tenant=tenant).pk}/cancel/")
    if action is Action.MODEL_VERSION_VIEW:
        from tests.training.factories import ModelVersionFactory

        return client.get(f"/api/v1/model-versions/{ModelVersionFactory(tenant=tenant).pk}/lineage/")
    if action is Action.MODEL_VERSION_PUBLISH:
        from tests.training.factories import ModelVersionFactory

        return client.post(f"/api/v1/model-versions/{ModelVersionFactory(tenant=tenant).pk}/publish/")
    if action is Action.MODEL_REGISTER:
        import uuid

        from tests.training.helpers import inbox_model

        directory = inbox_model(tenant, f"matrix-{uuid.uuid4().hex[:8]}")
        return client.post(
            "/api/v1/model-versions/", {"name": directory, "directory": directory}, format="json"
        )
    if action is Action.MODEL_ALIAS_MANAGE:
        from tests.training.factories import ModelVersionFactory

        return client.post(
            "/api/v1/model-aliases/",
            {"alias": "candidate", "version_id": ModelVersionFactory(tenant=tenant).pk},
            format="json",
        )
    if action is Action.EVOLUTION_VIEW:
        return client.get("/api/v1/evolution/policies/")
    if action is Action.EVOLUTION_MANAGE:
        return client.post("/api/v1/evolution/policies/", {"model": "matrix-model"}, format="json")
    if action is Action.EVOLUTION_APPROVE:
        from tests.evolution.factories import DecisionFactory, EvolutionPolicyFactory

        decision = DecisionFactory(policy=EvolutionPolicyFactory(tenant=tenant))
        return client.post(f"/api/v1/evolution/decisions/{decision.pk}/approve/")
    raise AssertionError(f"no request for {action}")


@pytest.mark.parametrize("role", list(Role))
@pytest.mark.parametrize("action", MATRIX_ACTIONS)
def test_role_action_matrix(role, action, tenant, api_client, member):
    from apps.audit.services import Actor
    from apps.tenants.services import api_key_create

    MembershipFactory(tenant=tenant, role=Role.ADMIN)  # so the tenant never lacks an admin
    victim_key, _ = api_key_create(
        tenant=tenant, actor=Actor.system("test"), name="victim", scopes=["inference"]
    )
    victim_member = MembershipFactory(tenant=tenant, role=Role.VIEWER)
    _replayable_trajectory(tenant)
    client = api_client(user=member(role))
    before = _snapshot(tenant)
    response = _request(action, client, (tenant, victim_key, victim_member))
    if role_can(role, action):
        assert response.status_code in {200, 201, 202} or (
            action is Action.TRAJECTORY_IMPORT
            and response.status_code == 400
            and response.json()["error"]["code"] != "role_forbidden"
        ), response.content
    else:
        assert response.status_code == 403, response.content
        assert response.json()["error"]["code"] == "role_forbidden"
        assert _snapshot(tenant) == before


def test_matrix_covers_every_action():
    assert set(PERMISSIONS) == set(Action)
    for roles, _scope in PERMISSIONS.values():
        assert Role.ADMIN in roles


@pytest.mark.parametrize(
    ("scopes", "allowed"), [(["admin"], True), (["inference"], False), (["rewards:write"], False)]
)
def test_key_scope_decides_admin_actions(scopes, allowed, api_client, tenant):
    client = api_client(scopes)
    before = _snapshot(tenant)
    response = client.patch("/api/v1/policy/", {"retention_days": 12}, format="json")
    if allowed:
        assert response.status_code == 200
        assert response.json()["retention_days"] == 12
    else:
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "scope_missing"
        assert "admin" in response.json()["error"]["message"]
        assert _snapshot(tenant) == before


def test_anonymous_gets_401(client, tenant):
    response = client.get("/api/v1/members/")
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"


def test_user_without_membership_gets_404(api_client, tenant):
    response = api_client(user=UserFactory()).get("/api/v1/policy/")
    assert response.status_code == 404
