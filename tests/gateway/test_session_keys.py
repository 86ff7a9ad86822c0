"""Session keys minted by /rl/start_session: they live no longer than the API key that minted them (revoked or
rotated: refused at once, through the shared cache), an ended session answers 410 while a forged key answers
401, and a flood of /rl/start_session gets 429 with Retry-After. The keys live in the shared state (not the
file cache, which culls), so hundreds minted later do not push one out, and a key that cannot be read there
is refused (503), never accepted."""

import time

import httpx
import pytest

from apps.gateway.principals import MEMO_SECONDS
from apps.trajectories.models import Trajectory
from tests.gateway.conftest import MODEL

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def _bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def _start(url: str, key: str) -> httpx.Response:
    return httpx.post(f"{url}/rl/start_session", json={"task_id": "t-1"}, headers=_bearer(key))


def _chat(url: str, key: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json=CHAT, headers=_bearer(key))


def _away_from_a_minute_boundary() -> None:
    """Rate limits slide over the minute, forgetting the previous minute's count as it goes: a burst that
    straddles a minute boundary for seconds could be granted a little more than its exact count."""
    while time.time() % 60 > 55:
        time.sleep(0.5)


def _new_key(admin) -> dict:
    created = admin.post(
        "/api/v1/keys/", {"name": f"agent-{time.monotonic_ns()}", "scopes": ["inference"]}, format="json"
    )
    assert created.status_code == 201
    return created.json()


def _assert_refused(response: httpx.Response, code: str) -> None:
    assert response.status_code == 401, response.text
    assert response.json()["error"]["code"] == code
    assert response.json()["error"]["type"] == "authentication_error"


def test_revoking_the_api_key_refuses_its_session_keys_at_once(gateway, backend, api_client):
    url, _ = gateway
    admin = api_client(["admin"])
    parent = _new_key(admin)
    sessions = [_start(url, parent["key"]).json()["api_key"] for _ in range(2)]
    for session_key in sessions:
        assert _chat(url, session_key).status_code == 200  # authenticated and remembered by the gateway
    assert admin.post(f"/api/v1/keys/{parent['id']}/revoke/").status_code == 200
    for session_key in sessions:
        _assert_refused(_chat(url, session_key), "key_revoked")
        _assert_refused(
            httpx.post(f"{url}/rl/set_reward", json={"reward": 1}, headers=_bearer(session_key)),
            "key_revoked",
        )
        _assert_refused(
            httpx.post(f"{url}/rl/end_session", json={}, headers=_bearer(session_key)), "key_revoked"
        )
    _assert_refused(_start(url, parent["key"]), "key_revoked")


def test_another_process_refuses_them_too(gateway, backend, api_client):
    """A process that did not see the revocation happen (no in-process notice) refuses the session key within
    its one-second memo: the parent key is re-checked through the shared cache, which revocation evicts."""
    from apps.gateway.principals import memo_forget_on_revocation
    from apps.tenants.authentication import api_key_forgotten

    url, _ = gateway
    admin = api_client(["admin"])
    parent = _new_key(admin)
    session_key = _start(url, parent["key"]).json()["api_key"]
    assert _chat(url, session_key).status_code == 200
    assert api_key_forgotten.disconnect(memo_forget_on_revocation)
    try:
        assert admin.post(f"/api/v1/keys/{parent['id']}/revoke/").status_code == 200
        time.sleep(MEMO_SECONDS + 0.1)
        _assert_refused(_chat(url, session_key), "key_revoked")
    finally:
        api_key_forgotten.connect(memo_forget_on_revocation)


def test_rotating_the_api_key_refuses_the_session_keys_it_had_minted(gateway, backend, api_client):
    url, _ = gateway
    admin = api_client(["admin"])
    parent = _new_key(admin)
    before = _start(url, parent["key"]).json()["api_key"]
    assert _chat(url, before).status_code == 200
    rotated = admin.post(f"/api/v1/keys/{parent['id']}/rotate/", {"grace_seconds": 600}, format="json")
    assert rotated.status_code == 201
    _assert_refused(_chat(url, before), "key_rotated")
    # During its grace period the old key still works, and so do the sessions it starts now.
    during_grace = _start(url, parent["key"])
    assert during_grace.status_code == 200
    assert _chat(url, during_grace.json()["api_key"]).status_code == 200
    assert _chat(url, _start(url, rotated.json()["key"]).json()["api_key"]).status_code == 200


def test_rotation_with_no_grace_refuses_everything_at_once(gateway, backend, api_client):
    url, _ = gateway
    admin = api_client(["admin"])
    parent = _new_key(admin)
    session_key = _start(url, parent["key"]).json()["api_key"]
    assert _chat(url, session_key).status_code == 200
    assert (
        admin.post(f"/api/v1/keys/{parent['id']}/rotate/", {"grace_seconds": 0}, format="json").status_code
        == 201
    )
    _assert_refused(_chat(url, session_key), "key_rotated")
    _assert_refused(_start(url, parent["key"]), "key_rotated")


def test_an_ended_session_answers_410_and_a_forged_key_401(gateway, backend, agent_key):
    url, gw = gateway
    session_key = _start(url, agent_key("inference")).json()["api_key"]
    assert _chat(url, session_key).status_code == 200
    assert httpx.post(f"{url}/rl/end_session", json={}, headers=_bearer(session_key)).status_code == 200

    def check_ended():
        for path, body in [
            ("/rl/end_session", {}),
            ("/rl/set_reward", {"reward": 1.0}),
            ("/v1/chat/completions", CHAT),
            ("/chat/completions", CHAT),
        ]:
            response = httpx.post(f"{url}{path}", json=body, headers=_bearer(session_key))
            assert response.status_code == 410, (path, response.text)
            assert response.json()["error"]["code"] == "session_ended"
        anthropic = httpx.post(
            f"{url}/v1/messages",
            headers={"x-api-key": session_key},
            json={"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]},
        )
        assert anthropic.status_code == 410
        assert anthropic.json()["type"] == "error"
        assert anthropic.json()["error"]["type"]
        assert anthropic.json()["error"]["message"]

    check_ended()
    # Another process (no memory of this session) answers the same: the ending is kept in the shared cache.
    from apps.gateway.principals import memo_clear

    gw.sessions.sessions.clear()
    memo_clear()
    check_ended()
    forged = httpx.post(f"{url}/rl/end_session", json={}, headers=_bearer("as-" + "x" * 32))
    _assert_refused(forged, "invalid_session_key")
    _assert_refused(_chat(url, "as-" + "y" * 32), "invalid_session_key")


def test_a_start_session_flood_gets_429(gateway, agent_key, other_tenant, settings):
    settings.AREAL_GATEWAY_SESSION_STARTS_PER_MINUTE = 5
    url, _ = gateway
    key = agent_key("inference")
    _away_from_a_minute_boundary()
    statuses = [_start(url, key).status_code for _ in range(8)]
    assert statuses[:5] == [200] * 5, statuses
    assert statuses[5:] == [429] * 3, statuses
    refused = _start(url, key)
    assert refused.status_code == 429
    assert int(refused.headers["retry-after"]) >= 1
    assert refused.json()["error"]["code"] == "rate_limit_sessions"
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert _start(url, agent_key("inference", of=other_tenant)).status_code == 200  # a per-tenant limit


def test_a_refused_start_session_body_takes_nothing_from_the_rate_budget(gateway, agent_key, settings):
    settings.AREAL_GATEWAY_SESSION_STARTS_PER_MINUTE = 2
    url, _ = gateway
    key = agent_key("inference")
    _away_from_a_minute_boundary()
    refused = [
        httpx.post(f"{url}/rl/start_session", json={"group_size": 0}, headers=_bearer(key)) for _ in range(3)
    ]
    assert [answer.status_code for answer in refused] == [422] * 3
    assert [_start(url, key).status_code for _ in range(3)] == [200, 200, 429]


def test_start_session_counts_against_the_tenants_request_rate(gateway, agent_key, tenant):
    tenant.policy.rate_limit_rpm = 2
    tenant.policy.save()
    url, _ = gateway
    key = agent_key("inference")
    _away_from_a_minute_boundary()
    statuses = [_start(url, key).status_code for _ in range(3)]
    assert statuses == [200, 200, 429]


def test_a_session_key_outlives_hundreds_minted_after_it(gateway, backend, agent_key, tenant):
    """Evaluation runs mint a key per case and the judge one per call: an agent's session key minted before
    400 others still verifies on every process (Django's file cache would have culled a third of them)."""
    from apps.gateway.principals import Principal, memo_clear, session_key_mint

    url, gw = gateway
    first = _start(url, agent_key("inference")).json()["api_key"]
    system = Principal(tenant_id=tenant.pk, tenant_slug=tenant.slug, key_prefix="eval", scopes=("inference",))
    minted = [
        session_key_mint(principal=system, session_id=f"eval-{index}", task_id="", group_id="")
        for index in range(400)
    ]
    memo_clear()  # as on a process that has never seen these keys
    gw.sessions.sessions.clear()
    assert _chat(url, first).status_code == 200
    refused = [
        index
        for index, session_key in enumerate(minted)
        if httpx.get(f"{url}/v1/models", headers=_bearer(session_key)).status_code != 200
    ]
    assert refused == []


def test_ending_a_session_key_keeps_its_lifetime(gateway, backend, agent_key):
    import json

    from apps.core.shared_state import shared_get
    from apps.gateway.principals import SESSION_KEY_SECONDS, _session_entry_key

    url, _ = gateway
    session_key = _start(url, agent_key("inference")).json()["api_key"]
    minted = json.loads(shared_get(_session_entry_key(session_key)))
    assert minted["ended"] is False
    assert 0 < minted["expires_at"] - time.time() <= SESSION_KEY_SECONDS
    assert httpx.post(f"{url}/rl/end_session", json={}, headers=_bearer(session_key)).status_code == 200
    ended = json.loads(shared_get(_session_entry_key(session_key)))
    assert ended["ended"] is True
    assert ended["expires_at"] == minted["expires_at"]  # ending does not renew the key


def test_a_session_key_that_cannot_be_read_is_refused(gateway, backend, agent_key, monkeypatch):
    """Fail closed: when the shared state cannot be read, a session key is refused with 503 and Retry-After
    (never accepted unverified); the API key itself still works."""
    from apps.core.shared_state import SharedStateUnavailable
    from apps.gateway import principals

    url, _ = gateway
    key = agent_key("inference")
    session_key = _start(url, key).json()["api_key"]

    def unavailable(*args, **kwargs):
        raise SharedStateUnavailable("database is locked")

    monkeypatch.setattr(principals, "shared_get", unavailable)
    monkeypatch.setattr(principals, "shared_set_many", unavailable)
    principals.memo_clear()
    sessions_before = set(Trajectory.objects.values_list("session_id", flat=True))
    for response in (_chat(url, session_key), _start(url, key)):
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == "session_store_unavailable"
        assert "retry" in response.json()["error"]["message"]
        assert int(response.headers["retry-after"]) >= 1
    # the refused start left no session behind: its trajectory was opened, then discarded with no key minted
    assert set(Trajectory.objects.values_list("session_id", flat=True)) == sessions_before
    assert _chat(url, key).status_code == 200
    monkeypatch.undo()
    principals.memo_clear()
    assert _chat(url, session_key).status_code == 200
