"""Longer fuzzing runs of the reliability suite (issue 14, "Fuzzing"): the REST API from its OpenAPI schema
(schemathesis; an API key of every scope, then a console session) and the gateway from its request
contract (tests/reliability/gateway_contract.py), with more examples per operation than `make test` runs.

    .venv/bin/python -m bench.reliability.fuzz                     # 50 examples per operation and mode
    .venv/bin/python -m bench.reliability.fuzz --examples 200 --seed 7 --only gateway
    CI=true .venv/bin/python -m bench.reliability.fuzz              # on PostgreSQL + Redis, as CI runs

It runs the same tests as `make test` (tests/reliability/test_api_fuzz.py, test_gateway_fuzz.py) through
pytest, so the test database, the embedded inference server and the in-process web server are set up the
same way, and prints what each run covered and found. Exit status 1 when anything was found; the findings
themselves (each with a curl line to reproduce it) are in pytest's output above the table.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from areal_web.env import env_bool

REPO_ROOT = Path(__file__).resolve().parents[2]
TESTS = {
    "rest": "tests/reliability/test_api_fuzz.py",
    "gateway": "tests/reliability/test_gateway_fuzz.py",
}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--examples", type=int, default=50, help="examples per operation and generation mode")
    parser.add_argument(
        "--seed", type=int, default=0, help="Hypothesis seed (runs are deterministic per seed)"
    )
    parser.add_argument("--only", choices=sorted(TESTS), help="only the REST API or only the gateway")
    arguments = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report.jsonl"
        env = {
            **os.environ,
            "FUZZ_EXAMPLES": str(arguments.examples),
            "FUZZ_SEED": str(arguments.seed),
            "FUZZ_REPORT": str(report),
        }
        paths = [TESTS[arguments.only]] if arguments.only else list(TESTS.values())
        started = time.monotonic()
        load_before = os.getloadavg()[0]
        completed = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:logging", *paths], cwd=REPO_ROOT, env=env
        )
        runs = [json.loads(line) for line in report.read_text().splitlines()] if report.exists() else []

    print(
        f"\nfuzzing, {arguments.examples} examples per operation and mode, seed {arguments.seed}, "
        f"{'PostgreSQL + Redis' if env_bool('CI') else 'SQLite, embedded layers'}; "
        f"{time.monotonic() - started:.0f} s, load {load_before:.1f} -> {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{'run':28} {'operations':>10} {'examples':>9} {'2xx':>6} {'4xx':>6} {'5xx':>5} {'findings':>8} {'s':>6}"
    )
    for run in runs:
        statuses = run["statuses"]
        print(
            f"{run['name']:28} {run['operations']:>10} {run['examples']:>9} {statuses.get('2xx', 0):>6} "
            f"{statuses.get('4xx', 0):>6} {statuses.get('5xx', 0):>5} {len(run['failures']):>8} {run['seconds']:>6}"
        )
    for run in runs:
        for failure in run["failures"]:
            print(f"\n{run['name']}: {failure.splitlines()[0]}")
    if len(runs) < len(paths):
        print("\nsome fuzz test did not finish (see pytest's output above)")
    return 0 if completed.returncode == 0 and all(not run["failures"] for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
