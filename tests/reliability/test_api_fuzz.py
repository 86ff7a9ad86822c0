"""Schemathesis over the REST API's own OpenAPI schema (/api/schema/), in process through Django's WSGI
handler: every operation, data that fits the schema and data that does not, as a tenant API key with every
scope and as a signed-in console admin (session cookie + CSRF token). No answer may be a 5xx, and every
answer must be documented: its status code, its content type and its body's shape.

Each example runs in a savepoint rolled back after the request, so an example that revokes the fuzzer's own
key or deletes its membership does not end the run, and the seeded objects stay as they were. Objects the
fuzzer creates never outlive their request either, so nothing it registers (a backend URL, say) is ever
contacted: health checks and publications only reach the seeded backend, on a closed loopback port.
"""

import json
import os
import zlib

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections, transaction
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.transport.serialization import Binary

from apps.audit.services import Actor
from apps.tenants.permissions import Role, Scope
from apps.tenants.services import api_key_create
from tests.evolution.factories import (
    DecisionFactory,
    EvolutionPolicyFactory,
    HarnessVersionFactory,
    SignalPointFactory,
)
from tests.inference.factories import BackendFactory
from tests.reliability.fuzzing import Tally, examples_per_operation, run_strategy
from tests.rewards.factories import make_spec, make_trajectory
from tests.servers import free_port

pytestmark = pytest.mark.fuzz

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
CSRF_TOKEN = "fuzzfuzzfuzzfuzzfuzzfuzzfuzzfuzz"  # any 32 letters are a valid CSRF secret


@schemathesis.serializer("application/x-ndjson")
def _json_lines(context, value):
    """The ATDP import's body (JSON Lines): bytes and text as they are, anything else one JSON value a line."""
    if isinstance(value, Binary):
        return value.data
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    items = value if isinstance(value, list) else [value]
    return "".join(json.dumps(item) + "\n" for item in items).encode()


@pytest.fixture
def wsgi_without_connection_housekeeping():
    """Django's WSGI handler closes the database connection around each request when it is inside a
    transaction (close_old_connections), which would end the test's transaction: the test client turns
    this off the same way."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield get_wsgi_application()
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def seeded(tenant, member):
    """Objects for the path parameters to hit, besides the ids the fuzzer makes up."""
    from tests.releases.helpers import release_at

    trajectory = make_trajectory(tenant)
    backend = BackendFactory(tenant=tenant, base_url=f"http://127.0.0.1:{free_port()}")
    spec = make_spec(tenant)
    release = release_at(tenant, "draft")
    key, raw = api_key_create(
        tenant=tenant, actor=Actor.system("fuzz"), name="fuzz", scopes=[s.value for s in Scope]
    )
    admin = member(Role.ADMIN)
    policy = EvolutionPolicyFactory(tenant=tenant)
    SignalPointFactory(policy=policy)
    return {
        "raw_key": raw,
        "user": admin,
        "ids": {
            "trajectory_id": [str(trajectory.pk)],
            "backend_id": [backend.pk],
            "spec_id": [spec.pk],
            "release_id": [release.pk],
            "version_id": [release.candidate_id, release.baseline_id],
            "key_id": [key.pk],
            "membership_id": [admin.memberships.get().pk],
            "policy_id": [policy.pk],
            "decision_id": [DecisionFactory(policy=policy).pk],
            "harness_id": [HarnessVersionFactory(tenant=tenant).pk],
        },
    }


def _rest_schema(app, seeded_ids):
    schema = schemathesis.openapi.from_wsgi("/api/schema/", app)

    @schema.hook
    def map_path_parameters(context, path_parameters):
        # Every other generated id is swapped for a seeded object's, so detail and action endpoints are
        # fuzzed on objects that exist as well as on missing ones.
        if not path_parameters:
            return path_parameters
        mapped = dict(path_parameters)
        for name, value in path_parameters.items():
            choices = seeded_ids.get(name)
            digest = zlib.crc32(json.dumps(value, default=str).encode()) if choices else 1
            if choices and digest % 2 == 0:
                mapped[name] = choices[(digest // 2) % len(choices)]
        return mapped

    return schema


def _fuzz(schema, tally: Tally, *, headers: dict, cookies: dict, modes) -> None:
    examples = examples_per_operation()
    for result in schema.get_all_operations():
        operation = result.ok()
        tally.operations.append(operation.label)

        def check(case):
            with transaction.atomic():
                response = case.call(headers=headers, cookies=cookies)
                transaction.set_rollback(True)
            tally.count(response.status_code)
            case.validate_response(response, checks=CHECKS)

        for mode in modes:
            run_strategy(
                tally,
                f"{operation.label} ({mode.value})",
                operation.as_strategy(mode),
                check,
                examples=examples,
            )


def test_rest_api_with_an_api_key_of_every_scope(seeded, wsgi_without_connection_housekeeping):
    schema = _rest_schema(wsgi_without_connection_housekeeping, seeded["ids"])
    tally = Tally("REST API, API key")
    _fuzz(
        schema,
        tally,
        headers={"Authorization": f"Bearer {seeded['raw_key']}"},
        cookies={},
        modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
    )
    tally.assert_clean()


def test_rest_api_with_a_console_session(seeded, wsgi_without_connection_housekeeping, client):
    client.force_login(seeded["user"])
    session_cookie = client.cookies["sessionid"].value
    schema = _rest_schema(wsgi_without_connection_housekeeping, seeded["ids"])
    tally = Tally("REST API, console session")
    modes = [GenerationMode.POSITIVE] + ([GenerationMode.NEGATIVE] if os.environ.get("FUZZ_EXAMPLES") else [])
    _fuzz(
        schema,
        tally,
        headers={"X-CSRFToken": CSRF_TOKEN},
        cookies={"sessionid": session_cookie, "csrftoken": CSRF_TOKEN},
        modes=modes,
    )
    tally.assert_clean()
