"""The demo's settings (apps/demo/settings.py): DEMO_MODEL picks the base and the defaults that go with it;
an environment variable still wins; an unknown model is refused before anything starts."""

import pytest

from apps.demo.settings import MODEL_DEFAULTS, DemoSettings

KNOBS = ("DEMO_MODEL", "DEMO_BUDGET_SECONDS", "DEMO_SKILL_STEPS", "DEMO_SFT_STEPS", "DEMO_SFT_LR", "DEMO_LR")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for name in KNOBS:
        monkeypatch.delenv(name, raising=False)


def test_the_default_model_keeps_the_demo_as_it_was():
    settings = DemoSettings.from_environment()

    assert settings.base_model == "default"
    assert (settings.budget_seconds, settings.skill_steps, settings.sft_steps) == (300, 200, 60)
    assert (settings.sft_learning_rate, settings.learning_rate) == (1e-3, 1e-4)


def test_smollm2_brings_its_own_defaults(monkeypatch):
    monkeypatch.setenv("DEMO_MODEL", "smollm2")

    settings = DemoSettings.from_environment()

    wanted = MODEL_DEFAULTS["smollm2"]
    assert settings.base_model == "smollm2"
    assert settings.budget_seconds == wanted["DEMO_BUDGET_SECONDS"]
    assert settings.skill_steps == wanted["DEMO_SKILL_STEPS"] == 0
    assert settings.sft_learning_rate == wanted["DEMO_SFT_LR"]
    assert settings.learning_rate == wanted["DEMO_LR"]


def test_an_environment_variable_wins_over_the_models_default(monkeypatch):
    monkeypatch.setenv("DEMO_MODEL", "smollm2")
    monkeypatch.setenv("DEMO_BUDGET_SECONDS", "900")

    assert DemoSettings.from_environment().budget_seconds == 900


def test_an_unknown_model_is_refused_with_the_choices(monkeypatch):
    monkeypatch.setenv("DEMO_MODEL", "gpt-9")

    with pytest.raises(ValueError, match=r"DEMO_MODEL='gpt-9' is not one of default, smollm2"):
        DemoSettings.from_environment()
