"""axe-core in the browser tests (the PyPI package axe-playwright-python bundles it): every page a journey
visits is checked, and a serious or critical violation fails the journey with what and where."""

from axe_playwright_python.sync_playwright import Axe

SERIOUS = {"serious", "critical"}
_axe = Axe()


def serious_violations(page) -> list[str]:
    """Each serious or critical axe-core violation on the page as it stands: rule, help, the first nodes."""
    results = _axe.run(page)
    found = []
    for violation in results.response["violations"]:
        if violation.get("impact") not in SERIOUS:
            continue
        targets = [" ".join(map(str, node["target"])) for node in violation["nodes"][:3]]
        found.append(f"{violation['id']} ({violation['impact']}): {violation['help']} at {targets}")
    return found


def assert_accessible(page, visited: list | None = None) -> None:
    """Fails on any serious or critical violation; `visited` (when given) collects the checked paths."""
    problems = serious_violations(page)
    if visited is not None:
        visited.append(page.url)
    assert problems == [], f"{page.url}: " + "; ".join(problems)
