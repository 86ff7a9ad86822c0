"""A tenant sets a model's chat template: checked by a probe conversation, written as a new candidate version
over the same weights (hard links), served by a server started on its directory, and never hot-swapped into
a server that reads another template."""

import os

import httpx
import pytest

from apps.audit.models import AuditEvent
from apps.core.errors import ValidationFailed
from apps.inference.models import BackendKind, BackendState
from apps.tenants.permissions import Role
from apps.training.imports import model_version_set_chat_template
from apps.training.models import ModelVersion, VersionStatus
from tests.inference.factories import BackendFactory
from tests.servers import inference_server
from tests.training.helpers import MODEL, SYSTEM, base_version
from workers.inference.chat_template import CHAT_TEMPLATE
from workers.models import manifest_problems, read_chat_template

pytestmark = pytest.mark.django_db

TERSE = CHAT_TEMPLATE.replace("You are a helpful assistant.", "You are a terse assistant.")
TOOL = {
    "type": "function",
    "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
}


@pytest.fixture
def models_dir(settings, tmp_path):
    settings.AREAL_MODELS_DIR = tmp_path / "models"
    return settings.AREAL_MODELS_DIR


@pytest.fixture
def base(tenant, default_model_dir, tmp_path):
    """v0 over a private copy of the default model (its files get hard-linked by the tests)."""
    import shutil

    copy = tmp_path / "base"
    shutil.copytree(default_model_dir, copy)
    return base_version(tenant, copy)


def _model_dirs(models_dir, tenant) -> list[str]:
    root = models_dir / tenant.slug / MODEL
    return sorted(entry.name for entry in root.iterdir()) if root.exists() else []


def test_a_template_version_shares_the_weights_and_is_a_candidate_child(tenant, base, models_dir):
    version = model_version_set_chat_template(tenant=tenant, actor=SYSTEM, version=base, chat_template=TERSE)
    assert (version.number, version.parent, version.status) == (1, base, VersionStatus.CANDIDATE)
    assert version.tokenizer_hash == base.tokenizer_hash
    weights = os.path.join(version.checkpoint_path, "model.safetensors")
    assert os.stat(weights).st_ino == os.stat(os.path.join(base.checkpoint_path, "model.safetensors")).st_ino
    assert read_chat_template(version.checkpoint_path) == TERSE
    assert read_chat_template(base.checkpoint_path) == CHAT_TEMPLATE
    assert manifest_problems(version.checkpoint_path) == []
    assert version.metrics["chat_template"]["weights_of_version"] == 0
    assert len(version.metrics["chat_template"]["sha256"]) == 64
    assert version.checkpoint_path.startswith(str(models_dir / tenant.slug / MODEL / "v0-template-"))
    event = AuditEvent.objects.get(tenant=tenant, verb="model_version.chat_template")
    assert event.data["parent"] == 0
    assert event.data["number"] == 1


@pytest.mark.parametrize(
    ("template", "code", "message"),
    [
        ("{% for m in messages %}{{ m.content }}", "invalid_chat_template", "does not render"),
        (
            "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
            "invalid_chat_template",
            "does not render the tool definitions",
        ),
        (CHAT_TEMPLATE, "chat_template_unchanged", "serves this chat template already"),
    ],
    ids=["syntax", "no-tools", "unchanged"],
)
def test_a_refused_template_writes_nothing(tenant, base, models_dir, template, code, message):
    with pytest.raises(ValidationFailed, match=message) as refused:
        model_version_set_chat_template(tenant=tenant, actor=SYSTEM, version=base, chat_template=template)
    assert refused.value.code == code
    assert ModelVersion.objects.filter(tenant=tenant).count() == 1
    assert _model_dirs(models_dir, tenant) == []
    assert not AuditEvent.objects.filter(verb="model_version.chat_template").exists()


def test_a_failed_registration_removes_the_directory(tenant, base, models_dir, monkeypatch):
    from apps.training import imports

    def failing_register(**kwargs):
        raise RuntimeError("database went away")

    monkeypatch.setattr(imports, "model_version_register", failing_register)
    with pytest.raises(RuntimeError, match="database went away"):
        model_version_set_chat_template(tenant=tenant, actor=SYSTEM, version=base, chat_template=TERSE)
    assert _model_dirs(models_dir, tenant) == []
    assert os.path.exists(os.path.join(base.checkpoint_path, "model.safetensors"))  # the parent's are kept


def test_the_api_reads_and_sets_a_template(api_client, tenant, other_tenant, base, models_dir):
    client = api_client(["admin"])
    url = f"/api/v1/model-versions/{base.pk}/chat-template/"
    got = client.get(url)
    assert got.status_code == 200
    assert got.json() == {"version": base.label, "chat_template": CHAT_TEMPLATE}
    created = client.post(url, {"chat_template": TERSE}, format="json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["number"], body["parent_id"], body["status"]) == (1, base.pk, "candidate")
    refused = client.post(url, {"chat_template": "{{ 1 / 0 }}"}, format="json")
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "invalid_chat_template"
    assert "ZeroDivisionError" in error["fields"]["chat_template"][0]
    too_long = client.post(url, {"chat_template": "x" * 100_001}, format="json")
    assert too_long.status_code == 400
    # another tenant's key sees a missing version, and nothing is written
    outsider = api_client(["admin"], of=other_tenant)
    assert outsider.get(url).status_code == 404
    assert outsider.post(url, {"chat_template": TERSE}, format="json").status_code == 404
    assert ModelVersion.objects.filter(tenant=tenant).count() == 2


def test_a_viewer_reads_but_cannot_set(api_client, member, base, models_dir):
    viewer = api_client(user=member(Role.VIEWER))
    url = f"/api/v1/model-versions/{base.pk}/chat-template/"
    assert viewer.get(url).status_code == 200
    assert viewer.post(url, {"chat_template": TERSE}, format="json").status_code == 403
    assert ModelVersion.objects.count() == 1


def test_the_model_page_has_the_form_and_registers_a_version(client, admin_user, tenant, base, models_dir):
    client.force_login(admin_user)
    page = client.get(f"/models/{MODEL}/lineage/")
    assert page.status_code == 200
    assert b'id="chat-template-form"' in page.content
    assert b"You are a helpful assistant." in page.content  # the production version's template, to edit
    refused = client.post(
        f"/models/{MODEL}/chat-template/", {"version": base.pk, "chat_template": "{% if %}"}
    )
    assert refused.status_code == 400
    assert b"TemplateSyntaxError" in refused.content
    done = client.post(f"/models/{MODEL}/chat-template/", {"version": base.pk, "chat_template": TERSE})
    assert done.status_code == 302
    assert ModelVersion.objects.get(tenant=tenant, number=1).parent == base


def test_a_viewer_sees_no_form(client, member, base):
    client.force_login(member(Role.VIEWER))
    page = client.get(f"/models/{MODEL}/lineage/")
    assert page.status_code == 200
    assert b"chat-template-form" not in page.content
    assert (
        client.post(
            f"/models/{MODEL}/chat-template/", {"version": base.pk, "chat_template": TERSE}
        ).status_code
        == 403
    )


def test_a_server_started_on_the_version_serves_its_template(tenant, base, models_dir, tmp_path):
    """No server change: the embedded server reads the template from the directory it starts on."""
    from transformers import AutoTokenizer

    version = model_version_set_chat_template(tenant=tenant, actor=SYSTEM, version=base, chat_template=TERSE)
    messages = [{"role": "user", "content": "What time is it?"}]
    tokenizer = AutoTokenizer.from_pretrained(version.checkpoint_path)
    expected = tokenizer(
        tokenizer.apply_chat_template(messages, tools=[TOOL], add_generation_prompt=True, tokenize=False),
        add_special_tokens=False,
    ).input_ids
    with inference_server(version.checkpoint_path, version="1", log_path=tmp_path / "inference.log") as url:
        reply = httpx.post(
            f"{url}/v1/chat/completions",
            json={
                "model": "policy-small",
                "messages": messages,
                "tools": [TOOL],
                "max_tokens": 1,
                "return_token_ids": True,
            },
            timeout=60,
        ).json()
    assert reply["prompt_token_ids"] == expected
    assert "terse" in tokenizer.decode(reply["prompt_token_ids"])


def test_publication_refuses_to_swap_a_template_version_into_a_running_server(
    api_client, tenant, base, models_dir
):
    version = model_version_set_chat_template(tenant=tenant, actor=SYSTEM, version=base, chat_template=TERSE)
    backend = BackendFactory(
        tenant=tenant,
        name="embedded",
        base_url="http://127.0.0.1:9",  # never called: the refusal comes first
        kind=BackendKind.EMBEDDED,
        served_model=MODEL,
        model_version="0",
        state=BackendState.UP,
    )
    response = api_client(["admin"]).post(f"/api/v1/model-versions/{version.pk}/publish/")
    assert response.status_code == 200
    [outcome] = response.json()["backends"]
    assert not outcome["ok"]
    assert "chat template differs from that of policy-small@0" in outcome["error"]
    assert "a server reads its template when it starts" in outcome["error"]
    backend.refresh_from_db()
    assert (backend.model_version, backend.state) == ("0", BackendState.UP)


SPIN = "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"  # 10^10 steps
# Renders like the project's template, except that it spins on a conversation whose last message says "spin".
SPINS_ON_REQUEST = CHAT_TEMPLATE + "{% if messages[-1].content == 'spin' %}" + SPIN + "{% endif %}"


def test_a_template_that_runs_for_hours_is_stopped_and_refused(tenant, base, models_dir):
    import time

    started = time.monotonic()
    with pytest.raises(ValidationFailed, match="ran longer than 2 s and was stopped") as refused:
        model_version_set_chat_template(
            tenant=tenant, actor=SYSTEM, version=base, chat_template=CHAT_TEMPLATE + SPIN
        )
    assert time.monotonic() - started < 20
    assert refused.value.code == "invalid_chat_template"
    assert ModelVersion.objects.filter(tenant=tenant).count() == 1
    assert _model_dirs(models_dir, tenant) == []


def test_a_server_stops_a_slow_render_and_takes_no_template_from_the_request(
    tenant, base, models_dir, tmp_path
):
    version = model_version_set_chat_template(
        tenant=tenant, actor=SYSTEM, version=base, chat_template=SPINS_ON_REQUEST
    )

    def ask(content, **extra):
        body = {"model": "policy-small", "messages": [{"role": "user", "content": content}], "max_tokens": 1}
        return httpx.post(f"{url}/v1/chat/completions", json=body | extra, timeout=60)

    with inference_server(version.checkpoint_path, version="1", log_path=tmp_path / "inference.log") as url:
        import time

        started = time.monotonic()
        spun = ask("spin")
        assert time.monotonic() - started < 20
        own_template = ask("hi", chat_template_kwargs={"chat_template": SPIN + "{{ 'x' }}"})
        fine = ask("hi")
    assert spun.status_code == 400
    assert "ran longer than 2 s and was stopped" in spun.text
    assert own_template.status_code == 400
    assert "chat_template_kwargs may not set chat_template" in own_template.text
    assert fine.status_code == 200  # the server went on serving
