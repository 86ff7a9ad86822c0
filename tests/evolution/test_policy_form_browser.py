"""In a real headless Chromium: an operator opens a policy's settings (signals and guardrails as rows, the
recipe and release plan as fields), which pass axe-core; a threshold out of range comes back on its row with the
input kept, and the corrected form saves."""

import pytest

from apps.evolution.models import EvolutionPolicy
from tests.browser_support import browser, login, page  # noqa: F401  (fixtures)
from tests.console.journey_support import checked
from tests.evolution.factories import EvolutionPolicyFactory
from tests.gateway.conftest import gateway  # noqa: F401  (fixture)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_operator_edits_the_settings_as_fields(gateway, page, member, tenant):  # noqa: F811
    url, _ = gateway
    policy = EvolutionPolicyFactory(tenant=tenant, model="policy-small")
    login(page, url, member("operator"))
    page.goto(f"{url}/evolution/policies/{policy.pk}/")
    page.click("#settings summary")
    visited: list = []
    checked(page, visited)  # the open form, rows included

    page.select_option("#id_signal-1-name", "thumbs_down_rate")
    page.select_option("#id_signal-1-op", "<")
    page.fill("#id_signal-1-threshold", "1.5")
    page.fill("#id_recipe_samples_per_step", "8")
    page.fill("#id_plan_stages", "10, 100")
    page.click("#save-policy")
    error = page.locator('.field-error[data-field="signal-1-threshold"]')
    assert "threshold of a rate must be in [0, 1]" in error.inner_text()
    assert page.input_value("#id_signal-1-threshold") == "1.5"
    assert page.input_value("#id_plan_stages") == "10, 100"
    checked(page, visited)  # the answer with its field errors
    assert EvolutionPolicy.objects.get().revision == 1

    page.fill("#id_signal-1-threshold", "0.4")
    page.click("#save-policy")
    page.wait_for_selector("text=Policy saved.")
    saved = EvolutionPolicy.objects.get()
    assert saved.signals["thumbs_down_rate"] == {"op": "<", "threshold": 0.4}
    assert saved.recipe == {"samples_per_step": 8}
    assert saved.release_plan == {"stages": [10, 100]}
