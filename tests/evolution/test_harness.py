"""Harness versions: validated, numbered per model, audited; the candidate model version that carries one over
production's weights; inherited by versions registered from a harnessed parent; what the gateway applies."""

import time

import pytest

from apps.audit.models import AuditEvent
from apps.audit.services import Actor
from apps.core.errors import ValidationFailed
from apps.evolution.harness_versions import (
    harness_candidate_create,
    harness_for_version,
    harness_propose,
    harness_version_create,
    version_serving,
    version_serving_clear,
)
from apps.evolution.models import HarnessVersion
from apps.inference.models import BackendKind, BackendState
from apps.loop.proposing import model_complete
from apps.training.models import ModelVersion, VersionStatus
from apps.training.services import model_version_register
from tests.gateway.conftest import (  # noqa: F401  (fixtures: the gateway, a real embedded server)
    embedded_backend_url,
    gateway,
)
from tests.inference.factories import BackendFactory
from tests.workers.inference.conftest import default_model_dir  # noqa: F401  (its model)
from workers.evolution.proposers import ModelProposer, RuleProposer

pytestmark = pytest.mark.django_db
PERSON = Actor.system("test")
ROUTE = {"get_weather": {"action": "route", "to": "get_weather_v2", "version": "2"}}


@pytest.fixture(autouse=True)
def _fresh_cache():
    version_serving_clear()
    yield
    version_serving_clear()


def production(tenant, name="weather"):
    return model_version_register(
        tenant=tenant,
        actor=PERSON,
        name=name,
        checkpoint_path="/models/weather/0",
        tokenizer_hash="tok",
        status=VersionStatus.PRODUCTION,
    )


def test_versions_are_numbered_per_model_and_tenant_and_audited(tenant, other_tenant):
    first = harness_version_create(tenant=tenant, actor=PERSON, model="weather", system_prompt="Be brief.")
    second = harness_version_create(
        tenant=tenant,
        actor=PERSON,
        model="weather",
        exemplars=[[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]],
        tool_routing=ROUTE,
        tool_versions={"search": "7"},
        parent=first,
        proposer="rule",
        rationale="get_weather fails with KeyError",
    )
    other_model = harness_version_create(tenant=tenant, actor=PERSON, model="coder")
    elsewhere = harness_version_create(tenant=other_tenant, actor=PERSON, model="weather")
    assert [first.label, second.label, other_model.label, elsewhere.label] == ["h1", "h2", "h1", "h1"]
    assert second.exemplars == [
        {
            "situation": "",
            "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}],
        }
    ]
    event = AuditEvent.objects.filter(tenant=tenant, verb="harness_version.create").order_by("sequence")[1]
    assert event.data["label"] == "h2"
    assert event.data["parent"] == "h1"
    assert event.data["tools"] == ["get_weather"]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"tool_routing": {"get_weather": {"action": "route"}}}, "tool_routing"),
        ({"tool_routing": {"get_weather": {"action": "delete"}}}, "tool_routing"),
        ({"tool_routing": {"a": {"action": "route", "to": "b"}, "b": {"action": "disable"}}}, "tool_routing"),
        ({"tool_routing": ["get_weather"]}, "tool_routing"),
        ({"exemplars": [[{"content": "no role"}]]}, "exemplars"),
        ({"exemplars": [[{"role": "system", "content": "no"}]]}, "exemplars"),
        ({"exemplars": [[{"role": "user", "content": "x"}]] * 9}, "exemplars"),
        ({"exemplars": [[{"role": "user", "content": "x" * 40_000}]]}, "exemplars"),
        ({"system_prompt": "x" * 8001}, "system_prompt"),
        ({"tool_versions": {"search": 7}}, "tool_versions"),
        ({"model": ""}, "model"),
        ({"rationale": "x" * 2001}, "rationale"),
    ],
)
def test_an_invalid_harness_is_refused_with_its_field_and_nothing_is_written(tenant, changes, field):
    arguments = {"tenant": tenant, "actor": PERSON, "model": "weather", **changes}
    with pytest.raises(ValidationFailed) as refused:
        harness_version_create(**arguments)
    assert field in refused.value.fields
    assert refused.value.code == "invalid_harness"
    assert not HarnessVersion.objects.exists()
    assert not AuditEvent.objects.filter(verb="harness_version.create").exists()


def test_a_parent_of_another_tenant_or_model_is_refused(tenant, other_tenant):
    foreign = harness_version_create(tenant=other_tenant, actor=PERSON, model="weather")
    other_model = harness_version_create(tenant=tenant, actor=PERSON, model="coder")
    for parent in (foreign, other_model):
        with pytest.raises(ValidationFailed) as refused:
            harness_version_create(tenant=tenant, actor=PERSON, model="weather", parent=parent)
        assert "parent" in refused.value.fields


def test_the_candidate_carries_the_harness_over_productions_weights(tenant):
    base = production(tenant)
    harness = harness_version_create(tenant=tenant, actor=PERSON, model="weather", tool_routing=ROUTE)
    candidate = harness_candidate_create(
        tenant=tenant, actor=PERSON, harness=harness, production_version=base
    )
    assert candidate.number == 1
    assert (candidate.parent, candidate.weights_of, candidate.harness) == (base, base, harness)
    assert candidate.checkpoint_path == base.checkpoint_path
    assert candidate.tokenizer_hash == base.tokenizer_hash
    assert candidate.status == VersionStatus.CANDIDATE
    event = AuditEvent.objects.get(tenant=tenant, verb="model_version.register", data__number=1)
    assert event.data["harness"] == "h1"
    assert event.data["weights_of"] == 0
    # a harness over a harness-only production still names the version whose weights serve
    again = harness_version_create(tenant=tenant, actor=PERSON, model="weather", parent=harness)
    next_candidate = harness_candidate_create(
        tenant=tenant, actor=PERSON, harness=again, production_version=candidate
    )
    assert (next_candidate.parent, next_candidate.weights_of) == (candidate, base)


def test_the_candidate_refuses_a_harness_of_another_model_or_tenant(tenant, other_tenant):
    base = production(tenant)
    for harness in (
        harness_version_create(tenant=tenant, actor=PERSON, model="coder"),
        harness_version_create(tenant=other_tenant, actor=PERSON, model="weather"),
    ):
        with pytest.raises(ValidationFailed):
            harness_candidate_create(tenant=tenant, actor=PERSON, harness=harness, production_version=base)
    assert not base.children.exists()


def test_a_version_registered_from_a_harnessed_parent_inherits_its_harness(tenant):
    """As the online runner registers its versions: parent = the version it trains from."""
    base = production(tenant)
    harness = harness_version_create(tenant=tenant, actor=PERSON, model="weather", system_prompt="Be brief.")
    candidate = harness_candidate_create(
        tenant=tenant, actor=PERSON, harness=harness, production_version=base
    )
    learnt = model_version_register(
        tenant=tenant,
        actor=PERSON,
        name="weather",
        checkpoint_path="/models/weather/online/step-1",
        tokenizer_hash="tok",
        parent=candidate,
    )
    assert learnt.harness == harness
    assert learnt.weights_of is None  # weights of its own
    plain = model_version_register(
        tenant=tenant, actor=PERSON, name="weather", checkpoint_path="/x", tokenizer_hash="tok", parent=base
    )
    assert plain.harness is None


def test_what_the_gateway_applies_per_version(tenant, other_tenant, django_assert_num_queries):
    base = production(tenant)
    harness = harness_version_create(
        tenant=tenant, actor=PERSON, model="weather", system_prompt="Be brief.", tool_routing=ROUTE
    )
    candidate = harness_candidate_create(
        tenant=tenant, actor=PERSON, harness=harness, production_version=base
    )
    spec = harness_for_version(tenant.pk, "weather", candidate.number)
    assert (spec.label, spec.system_prompt, dict(spec.tool_routing)) == ("h1", "Be brief.", ROUTE)
    with django_assert_num_queries(0):  # cached for the gateway
        served = version_serving(tenant_id=tenant.pk, model="weather", number="1")
        assert served.backend_version == "0"
        assert harness_for_version(tenant.pk, "weather", 0) is None
        assert version_serving(tenant_id=tenant.pk, model="weather", number="0").backend_version == "0"
        assert version_serving(tenant_id=tenant.pk, model="weather", number="v7").backend_version == "v7"
    assert harness_for_version(other_tenant.pk, "weather", 1) is None


def test_a_version_registered_after_the_map_was_read_is_found(tenant):
    base = production(tenant)
    assert harness_for_version(tenant.pk, "weather", 1) is None  # not registered yet
    harness = harness_version_create(tenant=tenant, actor=PERSON, model="weather", system_prompt="Be brief.")
    harness_candidate_create(tenant=tenant, actor=PERSON, harness=harness, production_version=base)
    time.sleep(1.05)  # a newer number is looked up again after a second, without waiting for the period
    assert harness_for_version(tenant.pk, "weather", 1).label == "h1"


def test_a_rule_proposal_is_stored_as_the_next_harness(tenant):
    base = production(tenant)
    current = harness_version_create(tenant=tenant, actor=PERSON, model="weather", system_prompt="Be brief.")
    serving = harness_candidate_create(tenant=tenant, actor=PERSON, harness=current, production_version=base)
    cluster = {
        "tool": "get_weather",
        "signature": "KeyError: city",
        "argument_shape": "{location:str}",
        "offered_tools": ["get_weather", "get_weather_v3"],
    }
    proposal = harness_propose(
        tenant=tenant,
        actor=Actor.system("evolution"),
        proposer=RuleProposer(),
        production_version=serving,
        cluster=cluster,
        examples=[],
    )
    assert proposal.label == "h2"
    assert proposal.parent == current
    assert proposal.system_prompt == "Be brief."
    assert proposal.tool_routing == {
        "get_weather": {"action": "route", "to": "get_weather_v3", "version": "3"}
    }
    assert (proposal.proposer, proposal.rationale) == ("rule", "get_weather: KeyError: city")


def test_a_model_proposal_that_refuses_stores_nothing(tenant):
    base = production(tenant)
    proposal = harness_propose(
        tenant=tenant,
        actor=PERSON,
        proposer=ModelProposer(lambda messages: "I'm sorry, I can't help with that."),
        production_version=base,
        cluster={"tool": "get_weather"},
        examples=[],
    )
    assert proposal is None
    assert not HarnessVersion.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_model_proposer_reaches_a_backend_of_the_tenant_through_the_gateway(
    gateway,  # noqa: F811
    settings,
    tenant,
    other_tenant,
    embedded_backend_url,  # noqa: F811
):
    """`model_complete` through the gateway to the tenant's own healthy backend (a real embedded server on
    loopback); tests/evolution/test_model_proposer_gateway.py shows the call budgeted and recorded."""
    settings.AREAL_GATEWAY_URL = gateway[0]
    BackendFactory(
        tenant=tenant,
        name="embedded",
        base_url=embedded_backend_url,
        kind=BackendKind.EMBEDDED,
        served_model="policy-small",
        model_version="0",
        state=BackendState.UP,
    )
    asked = []
    complete = model_complete(tenant=tenant, model="policy-small", max_tokens=6)

    def recording(messages):
        asked.append(messages)
        return complete(messages)

    reply = recording([{"role": "user", "content": "Rewrite: be brief."}])
    assert isinstance(reply, str)
    assert reply  # the random model still writes six tokens
    ModelProposer(recording).propose({"tool": "get_weather"}, None, [])
    assert asked[-1][0]["role"] == "system"
    with pytest.raises(ValidationFailed) as refused:  # another tenant has no backend of that model
        model_complete(tenant=other_tenant, model="policy-small")([{"role": "user", "content": "x"}])
    assert refused.value.code == "proposer_call_failed"
    assert "404 model_not_found" in refused.value.message, refused.value.message


def test_an_online_run_from_a_harnessed_version_registers_versions_with_that_harness(
    tenant,
    default_model_dir,
    settings,
    tmp_path,  # noqa: F811
):
    """The online runner registers each published version with parent = the version it trains from."""
    from apps.loop import training_runs as runners
    from apps.training.online import online_run_start
    from tests.training.helpers import base_version, qualified_trajectories

    settings.AREAL_MODELS_DIR = tmp_path / "models"
    base = base_version(tenant, default_model_dir)
    harness = harness_version_create(tenant=tenant, actor=PERSON, model=base.name, system_prompt="Be brief.")
    harnessed = harness_candidate_create(
        tenant=tenant, actor=PERSON, harness=harness, production_version=base
    )
    run = online_run_start(
        tenant=tenant,
        actor=PERSON,
        base_version=harnessed,
        hyperparameters={"learning_rate": 1e-3},
        samples_per_step=4,
        staleness_bound=1,
        max_steps=1,
        publish_to_backends=False,
    )
    qualified_trajectories(tenant)  # sampled by version 0, whose weights the harnessed version 1 serves
    assert runners.online_run_execute(run_id=run.pk, poll_seconds=0)["version"] == 2
    learnt = ModelVersion.objects.get(tenant=tenant, name=base.name, number=2)
    assert (learnt.parent, learnt.harness, learnt.weights_of) == (harnessed, harness, None)
    assert learnt.checkpoint_path != base.checkpoint_path
    assert harness_for_version(tenant.pk, base.name, 2).label == "h1"
