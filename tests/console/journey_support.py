"""What the role journeys share (tests/console/test_role_journeys.py): each page a journey visits is checked
with axe-core (no serious or critical violation) and, on a phone-sized pass, for a page that fits the screen;
the main pages are photographed for the app READMEs when AREAL_SCREENSHOTS names a folder."""

import os
from pathlib import Path
from urllib.parse import urlparse

from tests.console.accessibility import assert_accessible

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}
SCREENSHOTS = os.environ.get("AREAL_SCREENSHOTS", "")


# A form with field errors answers 400, which Chromium reports as a console error; it is the page meant.
FORM_ERROR_STATUS = "Failed to load resource: the server responded with a status of 400"


def checked(page, visited: list) -> None:
    """axe-core on the page as it stands (after its scripts ran), then the page's own errors: none."""
    page.wait_for_load_state("load")
    assert_accessible(page, visited)
    errors = [error for error in page.javascript_errors if not error.startswith(FORM_ERROR_STATUS)]
    assert errors == [], errors


def paths(visited: list) -> set[str]:
    """The paths of the pages checked (query strings aside), to hold a journey to the pages it must visit."""
    return {urlparse(address).path for address in visited}


def visit(page, url: str, visited: list) -> None:
    page.goto(url)
    checked(page, visited)


def fits_the_screen(page) -> None:
    """Nothing but a table's own scroll box is wider than the phone's screen."""
    width = page.evaluate("document.documentElement.scrollWidth")
    wide = page.evaluate(  # the phone's width: a mobile layout viewport widens to overflowing content
        """() => Array.from(document.querySelectorAll("body *"))
            .filter((element) => element.getBoundingClientRect().right > 390 + 1
                && !(element.parentElement && element.parentElement.closest(".scroll")))
            .slice(0, 5).map((element) => element.tagName + "." + element.className + "#" + element.id)"""
    )
    assert width <= PHONE["width"], f"{page.url} is {width} px wide on a {PHONE['width']} px screen: {wide}"


def screenshot(page, name: str) -> None:
    """The viewport (not the whole page, so the files stay small) as SCREENSHOTS/<name>.png."""
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}.png"))
    page.shoot(name)
