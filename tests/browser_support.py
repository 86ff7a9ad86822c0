"""Playwright driving Debian's headless Chromium (Playwright cannot download its own browser here)."""

import os
import shutil
from pathlib import Path

import pytest

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts" / "browser"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

# Playwright's sync API runs an event loop in the test thread; the Django ORM calls the tests make
# between browser steps are still ordinary synchronous calls.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def chromium_path() -> str:
    path = os.environ.get("AREAL_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.fail(
            "browser tests need Chromium: run `make browsers` (Debian packages chromium, chromium-driver)"
        )
    return path


@pytest.fixture(scope="module")
def browser():
    """Module-scoped: Playwright's sync API keeps an event loop running in this thread while it is open,
    which async tests elsewhere must not inherit (conftest also runs browser tests last)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS)
        yield instance
        instance.close()


@pytest.fixture
def page(browser, request):
    """A fresh page that records JavaScript errors; the test asserts there were none."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.javascript_errors = []
    page.on("pageerror", lambda error: page.javascript_errors.append(str(error)))
    page.on(
        "console", lambda message: message.type == "error" and page.javascript_errors.append(message.text)
    )
    page.shoot = lambda name: page.screenshot(
        path=str(ARTIFACTS / f"{request.node.name}-{name}.png"), full_page=True
    )
    yield page
    context.close()


def login(page, url: str, user) -> None:
    """Signs `user` in on the console's login page (the factories' password) and waits for the overview."""
    from tests.tenants.factories import PASSWORD

    page.goto(f"{url}/login/")
    page.fill("#id_username", user.username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{url}/")
