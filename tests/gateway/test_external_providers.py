"""Hosted providers behind the gateway, against stand-ins on 127.0.0.1 (tests/gateway/provider_standins.py):
an encrypted per-backend credential sent on every forward and probe, capability flags deciding which extra
parameters go upstream and whether a step carries token data, and Anthropic's Messages API forwarded natively.
The credential never appears in API output, logs or audit events; another tenant sees none of it."""

import contextlib
import json
import logging
import uuid

import anthropic
import httpx
import openai
import pytest

from apps.audit.models import AuditEvent
from apps.inference.models import InferenceBackend
from apps.qualification.services import qualification_evaluate
from apps.trajectories.models import Step, Trajectory
from apps.trajectories.serialize import trajectory_to_atdp
from tests.gateway.anthropic_app import serve_in_thread
from tests.gateway.helpers import as_recorded, drain
from tests.gateway.provider_standins import REPLY, anthropic_standin, openai_standin
from workers.atdp.training_view import EXCLUDED_NO_TOKENS, training_view_exclusions

pytestmark = pytest.mark.django_db(transaction=True)

OPENAI_KEY = "sk-standin-openai-5e3f9a7c1b2d4e6f"
ANTHROPIC_KEY = "sk-ant-standin-8c1d2e3f4a5b6c7d"
TEACHER = "teacher-model"
CLAUDE = "claude-standin"
TEXT_ONLY = {
    "returns_token_ids": False,
    "returns_logprobs": False,
    "returns_token_versions": False,
    "accepts_return_token_ids": False,
}


@pytest.fixture(autouse=True)
def profiles_read_every_time(monkeypatch):
    """Every forward reads the backend's profile again, so a rotation is seen by the next call (in production
    within apps.gateway.providers.PROFILE_SECONDS)."""
    from apps.gateway import providers

    monkeypatch.setattr(providers, "PROFILE_SECONDS", 0.0)
    providers.profiles_clear()


@pytest.fixture
def captured_logs(caplog):
    caplog.set_level(logging.DEBUG)
    return caplog


def register(client, **fields) -> dict:
    response = client.post("/api/v1/backends/", fields, format="json")
    assert response.status_code == 201, response.content
    checked = client.post(f"/api/v1/backends/{response.json()['id']}/check/")
    assert checked.status_code == 200, checked.content
    return checked.json()


@contextlib.contextmanager
def registered_teacher(admin, *, standin: dict | None = None, **fields):
    """An OpenAI-shaped stand-in on loopback serving TEACHER behind OPENAI_KEY, registered through the API as the
    credentialed `openai_compatible` backend `teacher`: yields (the backend as registered, the stand-in's record
    of calls)."""
    app, upstream = openai_standin(key=OPENAI_KEY, model=TEACHER, **(standin or {}))
    with serve_in_thread(app) as standin_url:
        yield (
            register(
                admin,
                name="teacher",
                base_url=standin_url,
                kind="openai_compatible",
                served_model=TEACHER,
                credential=OPENAI_KEY,
                **fields,
            ),
            upstream,
        )


def openai_sdk(url, key):
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)


def assert_secret_absent(secret: str, *texts) -> None:
    for text in texts:
        assert secret not in text


def audit_text(tenant) -> str:
    return json.dumps(list(AuditEvent.objects.filter(tenant=tenant).values("verb", "data")), default=str)


def test_a_hosted_openai_compatible_teacher_is_recorded_as_text_only_steps(
    gateway, tenant, api_client, agent_key, captured_logs
):
    url, gw = gateway
    admin = api_client(["admin"])
    with registered_teacher(admin, standin={"accepts_return_token_ids": False}, **TEXT_ONLY) as (
        backend,
        upstream,
    ):
        assert backend["state"] == "up"  # the probe (GET /v1/models) carried the bearer token
        assert upstream.of("/v1/models")[0]["headers"]["authorization"] == f"Bearer {OPENAI_KEY}"
        client = openai_sdk(url, agent_key("inference"))
        reply = client.chat.completions.create(
            model=TEACHER, messages=[{"role": "user", "content": "Capital of France?"}], max_tokens=20
        )
        stream = client.chat.completions.create(
            model=TEACHER,
            messages=[{"role": "user", "content": "Capital of France, streamed?"}],
            max_tokens=20,
            stream=True,
        )
        streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert reply.choices[0].message.content == REPLY
    assert streamed == REPLY
    calls = upstream.of("/v1/chat/completions")
    assert len(calls) == 2
    for call in calls:
        assert call["headers"]["authorization"] == f"Bearer {OPENAI_KEY}"
        assert "return_token_ids" not in call["body"]
        assert "logprobs" not in call["body"]
    drain(gw)
    steps = list(Step.objects.filter(tenant=tenant).order_by("created_at"))
    assert len(steps) == 2
    for step in steps:
        assert step.retokenized  # ATDP: no token data of the backend's own; text only
        assert step.completion_ids is None
        assert step.prompt_ids is None
        assert step.action["text"] == as_recorded(REPLY)
        assert step.backend_name == "teacher"
        assert step.completion_tokens == len(REPLY.split(" "))
    trajectory = Trajectory.objects.get(pk=steps[0].trajectory_id)
    verdict = qualification_evaluate(trajectory_id=trajectory.pk)
    assert "token_data_complete" in verdict.gate_reasons  # never queued for on-policy RL
    record = trajectory_to_atdp(trajectory, trajectory.steps.order_by("index"), [])
    assert training_view_exclusions(record) == [(str(steps[0].id), EXCLUDED_NO_TOKENS)]
    assert_secret_absent(OPENAI_KEY, captured_logs.text, audit_text(tenant))


def test_a_backend_that_does_not_accept_return_token_ids_refuses_it_until_its_flag_says_so(
    gateway, tenant, api_client, agent_key
):
    url, _ = gateway
    admin = api_client(["admin"])
    with registered_teacher(admin, standin={"accepts_return_token_ids": False}) as (backend, upstream):
        assert backend["accepts_return_token_ids"]  # the kind's default, as before the flags existed
        client = openai_sdk(url, agent_key("inference"))
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model=TEACHER, messages=[{"role": "user", "content": "Hi"}])
        assert "return_token_ids" in str(refused.value)
        patched = admin.patch(
            f"/api/v1/backends/{backend['id']}/", {"accepts_return_token_ids": False}, format="json"
        )
        assert patched.json()["accepts_return_token_ids"] is False
        reply = client.chat.completions.create(model=TEACHER, messages=[{"role": "user", "content": "Hi"}])
    assert reply.choices[0].message.content == REPLY
    assert "return_token_ids" not in upstream.of("/v1/chat/completions")[-1]["body"]


def test_a_reasoning_model_gets_its_cap_as_max_completion_tokens_only(
    gateway, tenant, api_client, agent_key, settings
):
    """OpenAI's reasoning models refuse `max_tokens`: an `openai_compatible` backend gets the cap in
    `max_completion_tokens` (the kind's default), whichever field the agent used, and the default cap there too
    when it named none. Switched to `max_tokens`, the refusal reaches the agent as the upstream's 400."""
    settings.AREAL_GATEWAY_DEFAULT_MAX_TOKENS = 64
    url, _ = gateway
    admin = api_client(["admin"])
    with registered_teacher(admin, standin={"refuses_max_tokens": True}, **TEXT_ONLY) as (backend, upstream):
        assert backend["cap_parameter"] == "max_completion_tokens"
        client = openai_sdk(url, agent_key("inference"))
        messages = [{"role": "user", "content": "Capital of France?"}]
        replies = [
            client.chat.completions.create(model=TEACHER, messages=messages, max_completion_tokens=30),
            client.chat.completions.create(model=TEACHER, messages=messages, max_tokens=20),
            client.chat.completions.create(model=TEACHER, messages=messages),
        ]
        stream = client.chat.completions.create(model=TEACHER, messages=messages, max_tokens=12, stream=True)
        streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        caps = [
            {
                field: call["body"][field]
                for field in ("max_tokens", "max_completion_tokens")
                if field in call["body"]
            }
            for call in upstream.of("/v1/chat/completions")
        ]
        patched = admin.patch(
            f"/api/v1/backends/{backend['id']}/", {"cap_parameter": "max_tokens"}, format="json"
        )
        assert patched.json()["cap_parameter"] == "max_tokens"
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model=TEACHER, messages=messages, max_completion_tokens=30)
    assert [reply.choices[0].message.content for reply in replies] == [REPLY] * 3
    assert streamed == REPLY
    assert caps == [
        {"max_completion_tokens": 30},
        {"max_completion_tokens": 20},
        {"max_completion_tokens": 64},
        {"max_completion_tokens": 12},
    ]
    assert "max_completion_tokens" in str(refused.value)
    assert upstream.of("/v1/chat/completions")[-1]["body"]["max_tokens"] == 30


def test_a_credentialed_server_with_token_data_records_ordinary_token_steps(
    gateway, tenant, api_client, agent_key
):
    url, gw = gateway
    app, upstream = openai_standin(
        key=OPENAI_KEY, model=TEACHER, accepts_return_token_ids=True, token_data=True
    )
    with serve_in_thread(app) as standin_url:
        register(
            api_client(["admin"]),
            name="vllm-with-key",
            base_url=standin_url,
            kind="openai_compatible",
            served_model=TEACHER,
            credential=OPENAI_KEY,
        )
        reply = openai_sdk(url, agent_key("inference")).chat.completions.create(
            model=TEACHER, messages=[{"role": "user", "content": "Hi"}]
        )
    body = upstream.of("/v1/chat/completions")[0]["body"]
    assert body["return_token_ids"] is True
    assert body["logprobs"] is True
    drain(gw)
    step = Step.objects.get(pk=reply.id)
    assert not step.retokenized
    assert step.completion_ids is not None


def test_rotating_and_clearing_the_credential_is_audited_and_used_at_once(
    gateway, tenant, api_client, agent_key, captured_logs
):
    url, _ = gateway
    new_key = "sk-standin-rotated-0a1b2c3d4e5f"
    app, upstream = openai_standin(key=new_key, model=TEACHER)
    admin = api_client(["admin"])
    with serve_in_thread(app) as standin_url:
        created = admin.post(
            "/api/v1/backends/",
            {
                "name": "teacher",
                "base_url": standin_url,
                "kind": "openai_compatible",
                "served_model": TEACHER,
                "credential": OPENAI_KEY,
                **TEXT_ONLY,
            },
            format="json",
        ).json()
        detail = f"/api/v1/backends/{created['id']}/"
        assert admin.post(detail + "check/").json()["state"] == "down"  # the stand-in wants the new key
        rotated = admin.patch(detail, {"credential": new_key}, format="json").json()
        assert rotated["credential_set"]
        assert rotated["credential_last4"] == new_key[-4:]
        assert admin.post(detail + "check/").json()["state"] == "up"
        client = openai_sdk(url, agent_key("inference"))
        assert (
            client.chat.completions.create(model=TEACHER, messages=[{"role": "user", "content": "Hi"}])
            .choices[0]
            .message.content
            == REPLY
        )
        cleared = admin.patch(detail, {"credential": None}, format="json").json()
        assert cleared["credential_set"] is False
        assert cleared["credential_last4"] == ""
        with pytest.raises(openai.APIStatusError) as refused:
            client.chat.completions.create(model=TEACHER, messages=[{"role": "user", "content": "Hi"}])
        listed = admin.get("/api/v1/backends/").content.decode()
    assert refused.value.status_code == 502
    assert refused.value.body["code"] == "backend_credential_refused"
    assert "Incorrect API key" not in str(refused.value)  # the provider's answer is not relayed
    verbs = list(
        AuditEvent.objects.filter(tenant=tenant, verb__startswith="backend.credential")
        .order_by("sequence")
        .values_list("verb", "data")
    )
    assert verbs == [
        ("backend.credential_rotate", {"previous_last4": OPENAI_KEY[-4:], "last4": new_key[-4:]}),
        ("backend.credential_clear", {"previous_last4": new_key[-4:]}),
    ]
    assert [call["headers"].get("authorization") for call in upstream.of("/v1/chat/completions")] == [
        f"Bearer {new_key}",
        None,
    ]
    assert "answered 401" in captured_logs.text  # the capture works: the failed probe was logged
    stored = InferenceBackend.objects.get(pk=created["id"])
    assert stored.credential_encrypted == ""
    for secret in (OPENAI_KEY, new_key):
        assert_secret_absent(
            secret, json.dumps(created), json.dumps(rotated), listed, captured_logs.text, audit_text(tenant)
        )


def test_a_credential_that_cannot_be_decrypted_refuses_clearly(
    gateway, tenant, api_client, agent_key, settings
):
    url, _ = gateway
    admin = api_client(["admin"])
    with registered_teacher(admin, **TEXT_ONLY) as (backend, upstream):
        settings.AREAL_SECRETS_KEY = "a-different-deployment-secret"
        with pytest.raises(openai.APIStatusError) as refused:
            openai_sdk(url, agent_key("inference")).chat.completions.create(
                model=TEACHER, messages=[{"role": "user", "content": "Hi"}]
            )
        checked = admin.post(f"/api/v1/backends/{backend['id']}/check/").json()
        settings.AREAL_SECRETS_PREVIOUS_KEYS = [settings.AREAL_SECRETS_KEY]
    assert refused.value.status_code == 502
    assert refused.value.body["code"] == "backend_credential_unreadable"
    assert checked["state"] == "down"
    assert "AREAL_SECRETS_KEY" in checked["last_error"]
    assert upstream.of("/v1/chat/completions") == []


def test_an_anthropic_backend_gets_messages_natively_with_its_key(
    gateway, tenant, api_client, agent_key, captured_logs
):
    url, gw = gateway
    app, upstream = anthropic_standin(key=ANTHROPIC_KEY, model=CLAUDE)
    agent = agent_key("inference")
    with serve_in_thread(app) as standin_url:
        backend = register(
            api_client(["admin"]),
            name="claude",
            base_url=standin_url,
            kind="anthropic",
            served_model=CLAUDE,
            credential=ANTHROPIC_KEY,
        )
        assert backend["state"] == "up"  # probed with x-api-key
        assert not any(backend[flag] for flag in TEXT_ONLY)  # the Messages API returns no token data
        client = anthropic.Anthropic(base_url=url, api_key=agent, max_retries=0)
        message = client.messages.create(
            model=CLAUDE,
            max_tokens=64,
            system="Answer in one sentence.",
            messages=[{"role": "user", "content": "Capital of France?"}],
        )
        with client.messages.stream(
            model=CLAUDE, max_tokens=64, messages=[{"role": "user", "content": "Again, streamed."}]
        ) as stream:
            streamed = "".join(stream.text_stream)
            final = stream.get_final_message()
        weather = {
            "name": "get_weather",
            "description": "Weather in a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
        with client.messages.stream(
            model=CLAUDE,
            max_tokens=64,
            tools=[weather],
            messages=[{"role": "user", "content": "Weather in Paris?"}],
        ) as stream:
            tool_message = stream.get_final_message()
    assert message.content[0].text == REPLY
    assert streamed == REPLY
    assert final.stop_reason == "end_turn"
    assert tool_message.content[0].type == "tool_use"
    assert tool_message.content[0].input == {"city": "Paris"}
    calls = upstream.of("/v1/messages")
    assert len(calls) == 3
    for call in calls:
        assert call["headers"]["x-api-key"] == ANTHROPIC_KEY  # the backend's key, never the agent's
        assert call["headers"]["anthropic-version"]
        assert agent not in json.dumps(call["headers"])
    assert calls[0]["body"]["system"] == "Answer in one sentence."
    assert calls[0]["body"]["messages"] == [{"role": "user", "content": "Capital of France?"}]
    drain(gw)
    first = Step.objects.get(pk=uuid.UUID(message.id.removeprefix("msg_")))
    assert first.endpoint == "messages"
    assert first.observation["messages"][0] == {"role": "system", "content": "Answer in one sentence."}
    assert first.action["text"] == as_recorded(REPLY)
    assert first.retokenized
    assert first.completion_ids is None
    assert (first.prompt_tokens, first.completion_tokens) == (12, 7)
    second = Step.objects.get(pk=uuid.UUID(final.id.removeprefix("msg_")))
    assert second.action["text"] == as_recorded(REPLY)
    assert not second.aborted
    assert second.ttft_ms is not None
    third = Step.objects.get(pk=uuid.UUID(tool_message.id.removeprefix("msg_")))
    assert third.action["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
    }
    assert third.result["finish_reason"] == "tool_calls"
    assert_secret_absent(ANTHROPIC_KEY, captured_logs.text, audit_text(tenant))


def test_an_anthropic_backend_is_not_served_chat_completions(gateway, tenant, api_client, agent_key):
    url, _ = gateway
    app, upstream = anthropic_standin(key=ANTHROPIC_KEY, model=CLAUDE)
    with serve_in_thread(app) as standin_url:
        register(
            api_client(["admin"]),
            name="claude",
            base_url=standin_url,
            kind="anthropic",
            served_model=CLAUDE,
            credential=ANTHROPIC_KEY,
        )
        with pytest.raises(openai.BadRequestError) as refused:
            openai_sdk(url, agent_key("inference")).chat.completions.create(
                model=CLAUDE, messages=[{"role": "user", "content": "Hi"}]
            )
    assert refused.value.body["code"] == "endpoint_not_served"
    assert upstream.of("/v1/messages") == []


def test_another_tenant_sees_neither_the_backend_nor_its_credential(
    gateway, tenant, other_tenant, api_client, agent_key
):
    url, _ = gateway
    with registered_teacher(api_client(["admin"]), **TEXT_ONLY) as (backend, upstream):
        theirs = api_client(["admin"], of=other_tenant)
        detail = f"/api/v1/backends/{backend['id']}/"
        assert theirs.get("/api/v1/backends/").json()["results"] == []
        assert theirs.get(detail).status_code == 404
        assert (
            theirs.patch(detail, {"credential": "sk-hijacked-credential"}, format="json").status_code == 404
        )
        assert theirs.post(detail + "check/").status_code == 404
        answer = httpx.post(
            f"{url}/v1/chat/completions",
            json={"model": TEACHER, "messages": [{"role": "user", "content": "Hi"}]},
            headers={"Authorization": f"Bearer {agent_key('inference', of=other_tenant)}"},
        )
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "model_not_found"
    assert upstream.of("/v1/chat/completions") == []
    assert InferenceBackend.objects.get(pk=backend["id"]).credential_last4 == OPENAI_KEY[-4:]


def test_the_address_allow_list_still_guards_a_credentialed_anthropic_backend(
    gateway, tenant, api_client, agent_key, settings
):
    url, _ = gateway
    app, upstream = anthropic_standin(key=ANTHROPIC_KEY, model=CLAUDE)
    admin = api_client(["admin"])
    with serve_in_thread(app) as standin_url:
        register(
            admin,
            name="claude",
            base_url=standin_url,
            kind="anthropic",
            served_model=CLAUDE,
            credential=ANTHROPIC_KEY,
        )
        settings.AREAL_BACKEND_ALLOWED_HOSTS = ["public"]  # loopback no longer allowed
        refused_registration = admin.post(
            "/api/v1/backends/",
            {
                "name": "claude-2",
                "base_url": standin_url,
                "kind": "anthropic",
                "served_model": CLAUDE,
                "credential": ANTHROPIC_KEY,
            },
            format="json",
        )
        client = anthropic.Anthropic(base_url=url, api_key=agent_key("inference"), max_retries=0)
        with pytest.raises(anthropic.APIStatusError) as refused:
            client.messages.create(model=CLAUDE, max_tokens=8, messages=[{"role": "user", "content": "Hi"}])
    assert refused_registration.status_code == 400
    assert refused_registration.json()["error"]["fields"] == {"base_url": ["not_allowed"]}
    assert refused.value.status_code == 502
    assert upstream.of("/v1/messages") == []  # the key never left for a refused address
    assert not InferenceBackend.objects.filter(name="claude-2").exists()
