"""An ATDP import passes the tenant's PII policy as gateway traffic does (POST /api/v1/trajectories/import/):
under `redact` the personal data is stored redacted with the same PII flags the gateway's scan gives (the
tenant's own patterns included), and a redacted step keeps no token arrays; under `block` the line is
refused by field and nothing is stored; under `off` it is stored as it came."""

import json

import pytest

from apps.gateway.policy import policy_load
from apps.tenants.models import TenantPolicy
from apps.trajectories.models import Step, Trajectory
from tests.trajectories.builders import atdp_record
from workers.pii import sanitizer_for

pytestmark = pytest.mark.django_db
IMPORT = "/api/v1/trajectories/import/"
QUESTION = "Mail ana.lopez@example.com or call +44 20 7946 0958 about order ORD-48213, weather in Paris?"
ANSWER = "I wrote to ana.lopez@example.com."


def _policy(tenant, mode):
    TenantPolicy.objects.filter(tenant=tenant).update(
        pii_mode=mode, pii_patterns=[{"name": "order_id", "regex": r"ORD-\d+"}]
    )


def _record(tenant, session_id):
    record = atdp_record(tenant, session_id)
    step = record["steps"][0]
    step["observation"]["messages"][1]["content"] = QUESTION
    step["action"]["text"] = ANSWER
    return record


def _post(client, record):
    body = (json.dumps(record) + "\n").encode()
    return client.generic("POST", IMPORT, body, content_type="application/x-ndjson")


def test_an_import_is_redacted_with_the_gateways_flags(tenant, api_client):
    _policy(tenant, "redact")
    record = _record(tenant, "pii-redact")
    response = _post(api_client(["trajectories:write"]), record)
    assert response.status_code == 200, response.content
    assert response.json()["rejected"] == []
    step = Step.objects.get(pk=record["steps"][0]["step_id"])
    stored = json.dumps([step.observation, step.action])
    for secret in ("ana.lopez", "7946", "ORD-48213"):
        assert secret not in stored
    assert "[REDACTED:email]" in stored
    # What the gateway's scan of this tenant (its snapshot's patterns, the same sanitizer) finds in them.
    scanner = sanitizer_for(policy_load(tenant.pk).custom_patterns)
    _, found_in = scanner.scan_value(record["steps"][0]["observation"])
    _, found_out = scanner.scan_value(record["steps"][0]["action"])
    assert step.pii_entities == sorted(set(found_in) | set(found_out))
    assert {"email", "phone"} <= set(step.pii_entities)
    assert len(step.pii_entities) == 3  # and the tenant's own pattern
    assert step.prompt_ids is None  # the ids would still encode the redacted text
    assert step.completion_ids is None
    exported = api_client(["trajectories:read"]).get(f"/api/v1/trajectories/{step.trajectory_id}/").json()
    assert exported["steps"][0]["pii"] == {"redacted": True, "entities": step.pii_entities}


def test_under_block_an_import_with_personal_data_is_refused_and_nothing_is_stored(tenant, api_client):
    _policy(tenant, "block")
    record = _record(tenant, "pii-block")
    response = _post(api_client(["trajectories:write"]), record)
    assert response.status_code == 400, response.content  # no line was kept
    (rejected,) = response.json()["rejected"]
    assert rejected["field"] == "steps[0]"
    assert "personal data" in rejected["message"]
    assert not Trajectory.objects.filter(tenant=tenant).exists()
    assert not Step.objects.filter(tenant=tenant).exists()


def test_with_pii_off_an_import_is_stored_as_it_came(tenant, api_client):
    _policy(tenant, "off")
    record = _record(tenant, "pii-off")
    assert _post(api_client(["trajectories:write"]), record).json()["rejected"] == []
    step = Step.objects.get(pk=record["steps"][0]["step_id"])
    assert step.observation["messages"][1]["content"] == QUESTION
    assert step.pii_entities == []
    assert step.completion_ids is not None
