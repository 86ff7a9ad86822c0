"""The demo's scenario host (demo/scenario.py): the world DEMO_SCENARIO names, the bad release it pushes (a
degraded copy of production registered and sent to release through a decision of the demo's policy), and the
scenario's section of the summary bench/evolution reads."""

import json
import time

import pytest
import torch
from safetensors.torch import load_file, save_file

from apps.audit.services import Actor
from apps.evolution.models import Decision, EvolutionPolicy, PolicyMode
from apps.training.models import VersionStatus
from apps.training.services import alias_move, model_version_register
from demo.config import DemoConfig
from demo.scenario import ScenarioDriver, scenario_summary_write, scenario_world
from workers.envs.traffic import Traffic

ACTOR = Actor.system("test")


def _settings(tmp_path, **changes) -> DemoConfig:
    values = {
        "base_model": "default",
        "var_dir": tmp_path,
        "keep": False,
        "exit_after_table": True,
        "approve_manually": False,
        "fresh_base": False,
        "summary_path": str(tmp_path / "summary.json"),
        "seed": 0,
        "budget_seconds": 10,
        "skill_steps": 0,
        "sft_steps": 0,
        "sft_batch": 1,
        "sft_learning_rate": 1e-3,
        "users": 1,
        "heldout_cases": 1,
        "eta": 1,
        "batch": 1,
        "publish_every": 1,
        "eval_every": 1,
        "learning_rate": 1e-4,
        "tolerance": 0.05,
        "canary_percent": 50,
        "canary_seconds": 1,
        "canary_patience": 30,
        "annotator_share": 0.0,
        "scenario": "",
        "scenario_at": None,
    }
    return DemoConfig(**{**values, **changes})


def test_the_setting_names_a_world_and_an_unknown_name_fails_before_anything_runs(tmp_path):
    assert scenario_world(_settings(tmp_path)) is None
    world = scenario_world(_settings(tmp_path, scenario="tool_failure", scenario_at=30))
    assert world.scenario.trigger().at == 30
    with pytest.raises(ValueError, match="unknown scenario"):
        _settings(tmp_path, scenario="meteor")


@pytest.fixture
def production(tenant, tmp_path):
    checkpoint = tmp_path / "v0"
    checkpoint.mkdir()
    save_file({"w": torch.ones(4, 4)}, checkpoint / "model.safetensors", metadata={"format": "pt"})
    version = model_version_register(
        tenant=tenant, actor=ACTOR, name="weather", checkpoint_path=str(checkpoint), tokenizer_hash="tok"
    )
    alias_move(tenant=tenant, actor=ACTOR, name="weather", alias="production", version=version)
    return version


def _driver(tenant, tmp_path, world, said):
    return ScenarioDriver(tenant=tenant, model="weather", run_dir=tmp_path, world=world, say=said.append)


def test_a_bad_release_registers_a_degraded_copy_of_production_and_sends_it_to_release(
    tenant, production, tmp_path
):
    # The control plane's policy for the demo's model (made by the demo's control-plane setup in a real run).
    policy = EvolutionPolicy.objects.create(tenant=tenant, model="weather", mode=PolicyMode.AUTO)
    world = scenario_world(_settings(tmp_path, scenario="bad_release", scenario_at=0)).start()
    said: list[str] = []
    done = _driver(tenant, tmp_path, world, said)._bad_release(world.take_requests("bad_release")[0])
    decision = Decision.objects.get(pk=done["decision"])
    assert decision.kind == "release"
    assert decision.policy == policy
    assert decision.status == "approved"  # auto mode: nothing waits for a person
    assert decision.version.number == 1
    assert decision.version.parent == production
    assert decision.version.status == VersionStatus.CANDIDATE
    assert decision.evidence["scenario"] == "bad_release"
    assert decision.decided_by.endswith("scenario bad_release")
    degraded = load_file(f"{decision.version.checkpoint_path}/model.safetensors")["w"]
    assert not torch.equal(degraded, torch.ones(4, 4))
    assert "sent to release" in said[0]


def test_without_a_policy_the_bad_version_is_registered_and_nothing_is_released(tenant, production, tmp_path):
    world = scenario_world(_settings(tmp_path, scenario="bad_release", scenario_at=0)).start()
    said: list[str] = []
    done = _driver(tenant, tmp_path, world, said)._bad_release(world.take_requests("bad_release")[0])
    assert done["decision"] is None
    assert done["version"] == 1
    assert not Decision.objects.exists()
    assert "no evolution policy" in said[0]


def test_the_summary_gains_the_scenario_its_decisions_and_live_success(tenant, production, tmp_path):
    from apps.evolution.decisions import decision_record

    demo_config = _settings(tmp_path, scenario="tool_failure", scenario_at=0)
    (tmp_path / "summary.json").write_text(json.dumps({"seed": 0, "rows": []}))
    world = scenario_world(demo_config)
    traffic = Traffic(
        gateway_url="http://127.0.0.1:9", api_key="k", model="weather", users=0, world=world
    ).start()
    now = time.time()
    traffic.stats.history.extend([(now, True), (now + 1, False)])
    policy = EvolutionPolicy.objects.create(tenant=tenant, model="weather", mode=PolicyMode.AUTO)
    decision_record(tenant=tenant, policy=policy, kind="update_harness", reason="cluster", actor=ACTOR)
    summary = scenario_summary_write(
        demo_config=demo_config, tenant=tenant, model="weather", world=world, traffic=traffic, driver=None
    )
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert summary["seed"] == 0
    assert summary["scenario"]["name"] == "tool_failure"
    assert [event["what"] for event in summary["scenario"]["events"]] == ["advertise_tools", "tool_faults"]
    assert [(row["kind"], row["status"]) for row in summary["decisions"]] == [("update_harness", "approved")]
    assert 0 <= summary["decisions"][0]["seconds"] < 60
    assert summary["scenario"]["policy"] == {"id": policy.pk, "mode": "auto", "revision": 1}
    assert summary["scenario"]["signal_points"] == 0
    assert summary["live_success"] == [{"seconds": 0.0, "episodes": 2, "success": 0.5}]


def test_a_bad_release_that_cannot_be_made_is_said_and_recorded_not_swallowed(tenant, tmp_path):
    EvolutionPolicy.objects.create(tenant=tenant, model="weather", mode=PolicyMode.AUTO)
    world = scenario_world(_settings(tmp_path, scenario="bad_release", scenario_at=0))
    said: list[str] = []
    driver = _driver(tenant, tmp_path, world, said)
    world.start()
    driver.start()  # no production version at all: the degraded copy cannot be made
    deadline = time.monotonic() + 10
    while not driver.done and time.monotonic() < deadline:
        time.sleep(0.1)
    driver.stop()
    assert driver.done[0]["what"] == "bad_release_failed"
    assert "scenario bad_release failed" in said[0]
    assert not Decision.objects.exists()


def test_a_bad_release_waits_until_production_is_good_enough_for_a_canary_to_tell(
    tenant, production, tmp_path
):
    world = scenario_world(_settings(tmp_path, scenario="bad_release", scenario_at=0)).start()
    said: list[str] = []
    driver = _driver(tenant, tmp_path, world, said)
    request = world.take_requests("bad_release")[0]
    assert request["value"]["production_success"] == 0.5
    assert not driver._production_ready(request)  # the base has no held-out figure yet
    assert not driver._production_ready(request)
    assert said == ["scenario bad_release: waits for production held-out success ≥ 50% (v0: unmeasured)"]
    production.metrics = {"heldout": {"success": 0.3, "cases": 64}}
    production.save(update_fields=["metrics"])
    assert not driver._production_ready(request)
    production.metrics = {"heldout": {"success": 0.55, "cases": 64}}
    production.save(update_fields=["metrics"])
    assert driver._production_ready(request)
    assert driver._production_ready({"what": "bad_release", "value": {"noise": 0.25}})  # no wait asked
