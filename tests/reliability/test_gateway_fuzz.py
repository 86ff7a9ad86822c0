"""The agent-facing gateway fuzzed from its own request contract (gateway_contract.py), over HTTP against
the real ASGI application and the embedded inference server: /v1/chat/completions, /v1/completions,
/v1/messages, /v1/models, /v1/rewards, /rl/start_session, /rl/set_reward and /rl/end_session, with data that
fits the contract and data that does not. No answer may be a 5xx; every answer must be a documented status
with a body of the documented shape: OpenAI's error on /v1 and /rl, Anthropic's on /v1/messages."""

import zlib

import httpx
import pytest
import schemathesis
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from apps.trajectories.models import Step
from tests.gateway.conftest import MODEL
from tests.gateway.helpers import drain
from tests.reliability.fuzzing import Tally, examples_per_operation, run_strategy
from tests.reliability.gateway_contract import MAX_TOKENS, gateway_contract

pytestmark = [pytest.mark.fuzz, pytest.mark.django_db(transaction=True)]

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


def cheap_body(body):
    """Caps generation in data that breaks the contract elsewhere: a missing or large `max_tokens` would
    let the model write up to its context limit. Invalid values (a string, zero, a bool) are left alone."""
    if not isinstance(body, dict):
        return body
    capped = dict(body)
    for field in ("max_tokens", "max_completion_tokens"):
        value = capped.get(field)
        if isinstance(value, int) and not isinstance(value, bool) and value > MAX_TOKENS:
            capped[field] = MAX_TOKENS
    if "max_tokens" not in capped and "max_completion_tokens" not in capped:
        capped["max_tokens"] = MAX_TOKENS
    return capped


@pytest.fixture
def agent_session(gateway, backend, agent_key):
    """A session with one completion: (tenant key, session key, session id, step id)."""
    url, gw = gateway
    key = agent_key("inference", "rewards:write")
    started = httpx.post(
        f"{url}/rl/start_session", json={"task_id": "fuzz"}, headers={"Authorization": f"Bearer {key}"}
    ).json()
    answer = httpx.post(
        f"{url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {started['api_key']}"},
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    drain(gw)
    step = Step.objects.get(trajectory__session_id=started["session_id"])
    return key, started["api_key"], started["session_id"], str(step.pk)


def test_gateway_endpoints_from_their_request_contract(gateway, agent_session):
    url, gw = gateway
    tenant_key, session_key, session_id, step_id = agent_session
    schema = schemathesis.openapi.from_dict(gateway_contract(MODEL))

    @schema.hook
    def map_body(context, body):
        body = cheap_body(body)
        if isinstance(body, dict):  # every other reward names the real session or step, not a made-up one
            for name, real in (("session_id", session_id), ("step_id", step_id), ("interaction_id", step_id)):
                if isinstance(body.get(name), str) and zlib.crc32(body[name].encode("utf-8", "replace")) % 2:
                    body = {**body, name: real}
        return body

    def key_for(path: str) -> str:
        if path == "/rl/set_reward":
            return session_key
        if path == "/rl/end_session":  # a fresh session each time: ending is once per session
            return httpx.post(
                f"{url}/rl/start_session", json={}, headers={"Authorization": f"Bearer {tenant_key}"}
            ).json()["api_key"]
        return tenant_key

    tally = Tally("gateway")
    examples = examples_per_operation(default=15)  # cheap: a few milliseconds a request
    for result in schema.get_all_operations():
        operation = result.ok()
        tally.operations.append(operation.label)

        def check(case):
            response = case.call(
                base_url=url, headers={"Authorization": f"Bearer {key_for(case.path)}"}, timeout=60
            )
            tally.count(response.status_code)
            case.validate_response(response, checks=CHECKS)

        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            run_strategy(
                tally,
                f"{operation.label} ({mode.value})",
                operation.as_strategy(mode),
                check,
                examples=examples,
            )
    drain(gw)
    tally.assert_clean()
