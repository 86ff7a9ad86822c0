"""Replay: a recorded trajectory's observations sent again to another model, recorded as purpose=replay."""

import openai
import pytest

from apps.audit.models import AuditEvent
from apps.inference.models import BackendKind, BackendState
from apps.tenants.models import TenantPolicy
from apps.trajectories.models import Step, Trajectory
from apps.trajectories.tasks import replay_trajectory
from tests.gateway.conftest import MODEL
from tests.gateway.helpers import drain, step_tokens
from tests.inference.factories import BackendFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("pii_off")]


@pytest.fixture
def candidate_backend(tenant, embedded_backend_url):
    """The same model at another version (registered on the same embedded server, for speed)."""
    return BackendFactory(
        tenant=tenant,
        name="candidate",
        base_url=embedded_backend_url,
        kind=BackendKind.EMBEDDED,
        served_model=MODEL,
        model_version="2",
        state=BackendState.UP,
    )


def _two_turns(url, key, gw) -> Trajectory:
    client = openai.OpenAI(
        base_url=f"{url}/v1", api_key=key, max_retries=0, default_headers={"X-Session-Id": "source-session"}
    )
    messages = [{"role": "user", "content": "Name a colour"}]
    first = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=6, temperature=0)
    messages += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "And another"},
    ]
    client.chat.completions.create(model=MODEL, messages=messages, max_tokens=6, temperature=0)
    drain(gw)  # the journal flusher writes steps (and their trajectory) in the background
    return Trajectory.objects.get(session_id="source-session")


def _replay(api_client, trajectory_id, **body):
    return api_client(["trajectories:write"]).post(
        f"/api/v1/trajectories/{trajectory_id}/replay/", body, format="json"
    )


def test_replay_records_each_observation_against_another_model_version(
    gateway, backend, candidate_backend, agent_key, api_client, tenant
):
    url, gw = gateway
    source = _two_turns(url, agent_key("inference"), gw)
    source_steps = list(source.steps.order_by("index"))
    assert len(source_steps) == 2

    response = _replay(
        api_client, source.id, model=MODEL, model_version="2"
    )  # enqueued on the eval queue on commit
    assert response.status_code == 202, response.content
    replay = Trajectory.objects.get(pk=response.json()["trajectory_id"])
    assert replay.purpose == "replay"
    assert replay.session_id == response.json()["session_id"]

    # The worker's part, run here in-process (a real worker runs tasks in tests/tasks).
    arguments = {
        "tenant_id": tenant.pk,
        "source_id": str(source.id),
        "session_id": replay.session_id,
        "model": MODEL,
        "model_version": "2",
    }
    assert replay_trajectory.apply(kwargs=arguments).get() == 2
    replay.refresh_from_db()
    replayed = list(replay.steps.order_by("index"))
    assert replay.status == "complete"
    assert replay.step_count == 2
    for original, again in zip(source_steps, replayed, strict=True):
        assert again.observation["messages"] == original.observation["messages"]
        assert again.state == {"replay_of": str(original.id)}
        assert again.served_model == MODEL
        assert again.model_version == "2"
        assert again.backend_name == "candidate"
        assert not again.error
        assert not again.aborted
        tokens = step_tokens(again)
        assert tokens["prompt_ids"] == step_tokens(original)["prompt_ids"]  # same observation, same tokenizer
        assert (
            len(tokens["completion_ids"]) == len(tokens["completion_logprobs"]) == again.completion_tokens > 0
        )
    assert replayed[1].parent_step_id == replayed[0].id
    assert AuditEvent.objects.filter(tenant=tenant, verb="trajectory.replay").count() == 1

    # A redelivered task records nothing twice.
    assert replay_trajectory.apply(kwargs=arguments).get() == 0
    assert Step.objects.filter(trajectory=replay).count() == 2


def test_replay_refuses_what_it_cannot_do(gateway, backend, agent_key, api_client, tenant, other_tenant):
    url, gw = gateway
    source = _two_turns(url, agent_key("inference"), gw)
    before = Trajectory.objects.count()

    unknown_model = _replay(api_client, source.id, model="no-such-model")
    assert unknown_model.status_code == 404
    assert unknown_model.json()["error"]["code"] == "model_not_found"
    missing_field = _replay(api_client, source.id)
    assert missing_field.status_code == 400
    assert "model" in missing_field.json()["error"]["fields"]
    read_only = api_client(["trajectories:read"]).post(
        f"/api/v1/trajectories/{source.id}/replay/", {"model": MODEL}, format="json"
    )
    assert read_only.status_code == 403
    foreign = api_client(["trajectories:write"], of=other_tenant).post(
        f"/api/v1/trajectories/{source.id}/replay/", {"model": MODEL}, format="json"
    )
    assert foreign.status_code == 404
    assert Trajectory.objects.count() == before


def test_metadata_only_trajectories_have_nothing_to_replay(gateway, backend, agent_key, api_client, tenant):
    TenantPolicy.objects.filter(tenant=tenant).update(consent_mode="metadata_only")
    url, gw = gateway
    source = _two_turns(url, agent_key("inference"), gw)
    response = _replay(api_client, source.id, model=MODEL)
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "nothing_to_replay"
