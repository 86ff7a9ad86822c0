"""The cross-tenant matrix of the gateway (its routes live outside Django's URL configuration).

Every gateway route is listed in `ROUTES_COVERED` with the test that names another tenant's objects
through it, or in `NO_OBJECT_IN_REQUEST` with the reason it names none; a new route in
`apps.gateway.asgi_app.ROUTES` that is in neither fails `test_every_gateway_route_is_in_the_matrix`.

Session ids are names inside the key's tenant: `/s/<session_id>/v1/...` with another tenant's session id
records into the caller's own session of that name, and never touches the other tenant's trajectory."""

import httpx
import openai
import pytest

from apps.gateway.asgi_app import ROUTES
from apps.rewards.models import Reward
from apps.trajectories.models import Step, Trajectory, trajectory_id_for
from tests.gateway.conftest import MODEL
from tests.gateway.helpers import drain
from tests.rewards.factories import make_spec, make_trajectory

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = ("POST", "/chat/completions")
ROUTES_COVERED = {
    ("POST", "/rewards"): "test_rewards_naming_another_tenants_session_or_step_are_not_found",
    CHAT: "test_a_session_url_with_another_tenants_session_id_stays_in_the_callers_tenant",
    (
        "POST",
        "/completions",
    ): "test_a_session_url_with_another_tenants_session_id_stays_in_the_callers_tenant",
    ("POST", "/messages"): "test_a_session_url_with_another_tenants_session_id_stays_in_the_callers_tenant",
    # another tenant's previous_response_id and response ids: test_responses.py (404 response_not_found)
    ("POST", "/responses"): "test_a_session_url_with_another_tenants_session_id_stays_in_the_callers_tenant",
    (
        "POST",
        "/rl/set_reward",
    ): "test_set_reward_and_end_session_naming_another_tenants_session_are_not_found",
    (
        "POST",
        "/rl/end_session",
    ): "test_set_reward_and_end_session_naming_another_tenants_session_are_not_found",
}
NO_OBJECT_IN_REQUEST = {
    ("GET", "/models"): "lists the caller's tenant's served models; takes no id",
    (
        "POST",
        "/rl/start_session",
    ): "creates a session of the caller's tenant; the body names a task, not a row",
}


def test_every_gateway_route_is_in_the_matrix():
    routes = set(ROUTES)
    uncovered = sorted(routes - set(ROUTES_COVERED) - set(NO_OBJECT_IN_REQUEST))
    assert not uncovered, (
        f"gateway routes not in the cross-tenant matrix: {uncovered}. Add each to ROUTES_COVERED in "
        "tests/gateway/test_cross_tenant.py with a test naming another tenant's objects through it, or to "
        "NO_OBJECT_IN_REQUEST with the reason it names none."
    )
    assert not (set(ROUTES_COVERED) | set(NO_OBJECT_IN_REQUEST)) - routes, (
        "remove routes that no longer exist"
    )
    assert all(name in globals() for name in ROUTES_COVERED.values())


def _their_state(tenant) -> tuple:
    return (
        sorted(Trajectory.objects.filter(tenant=tenant).values_list("id", "session_id", "step_count")),
        sorted(Step.objects.filter(tenant=tenant).values_list("id", "trajectory_id")),
        sorted(Reward.objects.filter(tenant=tenant).values_list("id", "value")),
    )


def test_rewards_naming_another_tenants_session_or_step_are_not_found(
    gateway, agent_key, tenant, other_tenant
):
    url, _ = gateway
    make_spec(tenant, name="quality")
    make_spec(other_tenant, name="quality")
    mine = make_trajectory(tenant, session_id="mine")
    theirs = make_trajectory(other_tenant, session_id="theirs-only")
    their_step = str(Step.objects.filter(trajectory=theirs).first().pk)
    headers = {"Authorization": f"Bearer {agent_key('rewards:write')}"}
    before = _their_state(other_tenant)

    for field, foreign, missing in (
        ("session_id", "theirs-only", "nobody-has-this"),
        ("step_id", their_step, "00000000-0000-4000-8000-000000000000"),
        ("interaction_id", their_step, "00000000-0000-4000-8000-000000000000"),
    ):
        refused = httpx.post(f"{url}/v1/rewards", json={field: foreign, "value": 0.5}, headers=headers)
        absent = httpx.post(f"{url}/v1/rewards", json={field: missing, "value": 0.5}, headers=headers)
        assert refused.status_code == absent.status_code == 404, (field, refused.text)
        assert refused.json()["error"]["code"] == absent.json()["error"]["code"]
    assert _their_state(other_tenant) == before

    own = httpx.post(f"{url}/v1/rewards", json={"session_id": "mine", "value": 0.5}, headers=headers)
    assert own.status_code == 201
    assert Reward.objects.filter(tenant=tenant, trajectory=mine).count() == 1


def test_a_session_url_with_another_tenants_session_id_stays_in_the_callers_tenant(
    gateway, backend, agent_key, tenant, other_tenant
):
    url, gw = gateway
    theirs = make_trajectory(other_tenant, session_id="shared-name")
    before = _their_state(other_tenant)
    client = openai.OpenAI(base_url=f"{url}/s/shared-name/v1", api_key=agent_key("inference"), max_retries=0)
    client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=2)
    client.completions.create(model=MODEL, prompt="x", max_tokens=2)
    client.responses.create(model=MODEL, input="x", max_output_tokens=2, store=False)
    anthropic = httpx.post(
        f"{url}/s/shared-name/v1/messages",
        headers={"x-api-key": client.api_key},
        json={"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "x"}]},
    )
    assert anthropic.status_code == 200, anthropic.text
    drain(gw)

    assert _their_state(other_tenant) == before
    theirs.refresh_from_db()
    assert theirs.tenant == other_tenant
    assert theirs.step_count == 2
    mine = Trajectory.objects.get(tenant=tenant, session_id="shared-name")
    assert mine.pk == trajectory_id_for(tenant_id=tenant.pk, session_id="shared-name") != theirs.pk
    assert Step.objects.filter(trajectory=mine, tenant=tenant).count() == 4


def test_set_reward_and_end_session_naming_another_tenants_session_are_not_found(
    gateway, backend, agent_key, tenant, other_tenant
):
    """AReaL's older form names the session (path or body) with the tenant key: another tenant's session
    answers exactly like one nobody has, and nothing of theirs changes."""
    url, gw = gateway
    their_key = agent_key("inference", of=other_tenant)
    their_session = httpx.post(
        f"{url}/rl/start_session", json={"task_id": "t"}, headers={"Authorization": f"Bearer {their_key}"}
    ).json()["session_id"]
    drain(gw)
    before = _their_state(other_tenant)
    headers = {"Authorization": f"Bearer {agent_key('inference', 'rewards:write')}"}

    def calls(session_id: str) -> list[tuple[str, dict]]:
        return [
            (f"/v1/{session_id}/rl/set_reward", {"reward": 1.0}),
            (f"/s/{session_id}/rl/set_reward", {"reward": 1.0}),
            ("/rl/set_reward", {"session_id": session_id, "reward": 1.0}),
            (f"/v1/{session_id}/rl/end_session", {"final_reward": 1.0}),
            ("/v1/rl/end_session", {"session_id": session_id, "final_reward": 1.0}),
        ]

    for (path, body), (absent_path, absent_body) in zip(
        calls(their_session), calls("nobody-has-this"), strict=True
    ):
        refused = httpx.post(f"{url}{path}", json=body, headers=headers)
        absent = httpx.post(f"{url}{absent_path}", json=absent_body, headers=headers)
        assert refused.status_code == absent.status_code == 404, (path, refused.text)
        assert refused.json()["error"]["code"] == absent.json()["error"]["code"] == "session_not_found"
        assert refused.json()["error"]["message"].replace(their_session, "X") == absent.json()["error"][
            "message"
        ].replace("nobody-has-this", "X")
    assert _their_state(other_tenant) == before
    assert Trajectory.objects.get(tenant=other_tenant, session_id=their_session).status == "open"
