"""How long each test file took in a recent run (`durations.json`), so that `make test` hands the longest files
to its xdist workers first and no long file starts when the other worker is nearly done.

Refresh after a change of the suite's shape (a stale figure only costs balance, never a test):

    CI=true .venv/bin/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder \
        -m "not vllm and not real_model and not frameworks" --junitxml=junit.xml
    .venv/bin/python -m tests.durations junit.xml
"""

import json
import sys
import xml.etree.ElementTree as ElementTree
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DURATIONS = Path(__file__).with_name("durations.json")


def file_seconds() -> dict[str, float]:
    """Seconds per test file (its path from the repository root), as last recorded."""
    return json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}


def _test_file(classname: str) -> str | None:
    """The file of a JUnit classname (`tests.app.test_x` or `tests.app.test_x.TestClass`)."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        path = "/".join(parts[:end]) + ".py"
        if (ROOT / path).exists():
            return path
    return None


def record(junit_xml: Path) -> dict[str, int]:
    seconds: Counter = Counter()
    for case in ElementTree.parse(junit_xml).getroot().iter("testcase"):
        path = _test_file(case.get("classname", ""))
        if path:
            seconds[path] += float(case.get("time") or 0)
    return {path: round(total) for path, total in sorted(seconds.items())}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.durations <junit.xml>")
    recorded = record(Path(sys.argv[1]))
    DURATIONS.write_text(json.dumps(recorded, indent=1) + "\n")
    print(f"{len(recorded)} files, {sum(recorded.values())} s in all, written to {DURATIONS.name}")
