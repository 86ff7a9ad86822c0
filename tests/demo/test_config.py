"""The demo's configuration (demo/config.py): DEMO_MODEL picks the base and the defaults that go with it;
an environment variable still wins; an unknown model is refused before anything starts."""

import pytest

from demo.config import MODEL_DEFAULTS, DemoConfig

KNOBS = (
    "DEMO_MODEL",
    "DEMO_TASK",
    "DEMO_BFCL_CATEGORIES",
    "DEMO_BUDGET_SECONDS",
    "DEMO_SKILL_STEPS",
    "DEMO_SFT_STEPS",
    "DEMO_SFT_LR",
    "DEMO_LR",
    "DEMO_TRAINER_NICENESS",
    "DEMO_CANARY_PATIENCE",
    "DEMO_GATE_THREADS",
    "DEMO_BFCL_GROUP",
    "DEMO_ROLLOUT_BOUND",
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for name in KNOBS:
        monkeypatch.delenv(name, raising=False)


def test_the_default_model_keeps_the_demo_as_it_was():
    settings = DemoConfig.from_environment()

    assert settings.base_model == "default"
    assert (settings.budget_seconds, settings.skill_steps, settings.sft_steps) == (300, 200, 60)
    assert (settings.sft_learning_rate, settings.learning_rate) == (1e-3, 1e-4)


def test_smollm2_brings_its_own_defaults(monkeypatch):
    monkeypatch.setenv("DEMO_MODEL", "smollm2")

    settings = DemoConfig.from_environment()

    wanted = MODEL_DEFAULTS["smollm2"]
    assert settings.base_model == "smollm2"
    assert settings.budget_seconds == wanted["DEMO_BUDGET_SECONDS"]
    assert settings.skill_steps == wanted["DEMO_SKILL_STEPS"] == 0
    assert settings.sft_learning_rate == wanted["DEMO_SFT_LR"]
    assert settings.learning_rate == wanted["DEMO_LR"]


def test_an_environment_variable_wins_over_the_models_default(monkeypatch):
    monkeypatch.setenv("DEMO_MODEL", "smollm2")
    monkeypatch.setenv("DEMO_BUDGET_SECONDS", "900")

    assert DemoConfig.from_environment().budget_seconds == 900


def test_an_unknown_model_is_refused_with_the_choices(monkeypatch):
    monkeypatch.setenv("DEMO_MODEL", "gpt-9")

    with pytest.raises(ValueError, match=r"DEMO_MODEL='gpt-9' is not one of default, smollm2"):
        DemoConfig.from_environment()


def test_the_weather_desk_stays_the_default_task():
    settings = DemoConfig.from_environment()

    assert (settings.task, settings.model_name) == ("weather", "weather")
    assert settings.micro_batch_tokens == 8192
    assert (settings.trainer_niceness, settings.canary_patience) == (0, 30)
    assert (settings.eta, settings.rollout_bound) == (8, None)  # ρ = η


def test_the_bfcl_task_runs_smollm2_on_the_single_turn_categories_with_its_own_defaults(monkeypatch):
    from demo.config import BFCL_CATEGORIES, TASK_DEFAULTS

    monkeypatch.setenv("DEMO_TASK", "bfcl")

    settings = DemoConfig.from_environment()

    assert (settings.task, settings.model_name, settings.base_model) == ("bfcl", "bfcl", "smollm2")
    assert settings.bfcl_categories == BFCL_CATEGORIES
    assert "multi_turn_base" not in settings.bfcl_categories
    assert settings.budget_seconds == TASK_DEFAULTS["bfcl"]["DEMO_BUDGET_SECONDS"] == 900
    assert settings.sft_learning_rate == TASK_DEFAULTS["bfcl"]["DEMO_SFT_LR"]
    assert settings.micro_batch_tokens == 2048  # the weather desk keeps 8,192 (memory: demo/config.py)
    # the gate and the canary must fit the loop: the trainer yields the cores, the canary waits longer
    assert (settings.trainer_niceness, settings.canary_patience) == (10, 80)
    # production lags the learner by a release: η wide, the sessions let out bounded apart (ρ)
    assert (settings.eta, settings.rollout_bound) == (8, 1)
    monkeypatch.setenv("DEMO_ROLLOUT_BOUND", "-1")
    assert DemoConfig.from_environment().rollout_bound is None
    monkeypatch.setenv("DEMO_TRAINER_NICENESS", "0")
    assert DemoConfig.from_environment().trainer_niceness == 0
    monkeypatch.setenv("DEMO_BFCL_CATEGORIES", "irrelevance, simple_python")
    assert DemoConfig.from_environment().bfcl_categories == ("irrelevance", "simple_python")
    assert settings.bfcl_group == 1  # each answer's GRPO group: its category
    monkeypatch.setenv("DEMO_BFCL_GROUP", "4")
    assert DemoConfig.from_environment().bfcl_group == 4
    monkeypatch.setenv("DEMO_BFCL_GROUP", "0")
    with pytest.raises(ValueError, match="DEMO_BFCL_GROUP=0"):
        DemoConfig.from_environment()


def test_groups_of_one_cases_answers_make_the_learner_take_whole_groups(monkeypatch):
    from demo.bfcl import BfclMixin
    from demo.loop import LoopMixin

    class Recipe(BfclMixin, LoopMixin):
        def __init__(self):
            self.demo_config = DemoConfig.from_environment()

    assert Recipe()._grouping() == {}  # the weather desk
    monkeypatch.setenv("DEMO_TASK", "bfcl")
    assert Recipe()._grouping() == {}  # a category's answers never settle as a group
    monkeypatch.setenv("DEMO_BFCL_GROUP", "4")
    assert Recipe()._grouping() == {"whole_groups": True, "skip_uniform_groups": True}


@pytest.mark.parametrize("category", ["live_simple", "multi_turn_base"])
def test_the_bfcl_task_refuses_live_and_multi_turn_categories(monkeypatch, category):
    monkeypatch.setenv("DEMO_TASK", "bfcl")
    monkeypatch.setenv("DEMO_BFCL_CATEGORIES", f"simple_python,{category}")

    with pytest.raises(ValueError, match=category):
        DemoConfig.from_environment()


def test_the_bfcl_task_refuses_the_default_model_and_an_unknown_task(monkeypatch):
    monkeypatch.setenv("DEMO_TASK", "bfcl")
    monkeypatch.setenv("DEMO_MODEL", "default")
    with pytest.raises(ValueError, match="DEMO_TASK=bfcl runs with DEMO_MODEL=smollm2"):
        DemoConfig.from_environment()
    monkeypatch.setenv("DEMO_TASK", "chess")
    with pytest.raises(ValueError, match="DEMO_TASK='chess' is not one of bfcl, weather"):
        DemoConfig.from_environment()
