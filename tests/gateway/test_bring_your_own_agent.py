"""Bring your own agent, end to end through the REST API only (no `python -m demo`, no Django shell): from an
empty tenant and its admin key, register a base model from a small model directory, register the embedded
server serving it on 127.0.0.1 as a backend, make the version production, mint an agent key, and see an
unmodified openai-SDK agent's chat completion answered by that version through the gateway and recorded;
then start the online run that learns from that traffic."""

import shutil

import openai
import pytest

from apps.trajectories.models import Step
from tests.gateway.helpers import drain
from tests.servers import inference_server

pytestmark = pytest.mark.django_db(transaction=True)
MODEL = "byo-agent"


def _ok(response, status=200):
    assert response.status_code == status, response.content
    return response.json()


def test_an_empty_tenant_serves_its_own_model_through_api_calls_alone(
    gateway, tenant, api_client, default_model_dir, settings, tmp_path, monkeypatch
):
    from apps.training.tasks import run_online

    settings.AREAL_MODEL_INBOX_DIR = tmp_path / "inbox"
    settings.AREAL_MODELS_DIR = tmp_path / "models"
    started_runs = []
    monkeypatch.setattr(run_online, "delay", lambda run_id: started_runs.append(run_id))
    shutil.copytree(default_model_dir, tmp_path / "inbox" / tenant.slug / "my-base")  # the tenant's upload
    admin = api_client(["admin"])
    assert _ok(admin.get("/api/v1/model-versions/"))["results"] == []

    version = _ok(
        admin.post("/api/v1/model-versions/", {"name": MODEL, "directory": "my-base"}, format="json"), 201
    )
    assert (version["number"], version["status"]) == (0, "candidate")
    url, gw = gateway
    with inference_server(
        version["checkpoint_path"], served_model=MODEL, version="0", log_path=tmp_path / "inference.log"
    ) as server_url:
        backend = _ok(
            admin.post(
                "/api/v1/backends/",
                {
                    "name": "slot-a",
                    "base_url": server_url,
                    "kind": "embedded",
                    "served_model": MODEL,
                    "model_version": "0",
                },
                format="json",
            ),
            201,
        )
        assert _ok(admin.post(f"/api/v1/backends/{backend['id']}/check/"))["state"] == "up"
        routing = _ok(admin.post("/api/v1/routing/", {"version_id": version["id"]}, format="json"))
        assert routing["stable"] == {"id": version["id"], "number": 0, "status": "production"}
        agent_key = _ok(
            admin.post("/api/v1/keys/", {"name": "agent", "scopes": ["inference"]}, format="json"), 201
        )

        agent = openai.OpenAI(base_url=f"{url}/v1", api_key=agent_key["key"], max_retries=0)
        reply = agent.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Hello there"}], max_tokens=8, temperature=0
        )
        drain(gw)

    step = Step.objects.get(pk=reply.id)
    assert step.trajectory.tenant_id == tenant.pk
    assert (step.served_model, step.model_version, step.backend_name) == (MODEL, "0", "slot-a")
    assert reply.choices[0].message.content is not None
    history = _ok(api_client(["trajectories:read"]).get("/api/v1/serving-history/", {"model": MODEL}))
    assert [(row["stable"]["number"], row["canary"]) for row in history["results"]] == [(0, None)]

    run = _ok(admin.post("/api/v1/online-runs/", {"model": MODEL, "samples_per_step": 4}, format="json"), 201)
    assert (run["base_version_id"], run["status"], run["publish_to_backends"]) == (
        version["id"],
        "running",
        True,
    )
    assert started_runs == [run["id"]]
