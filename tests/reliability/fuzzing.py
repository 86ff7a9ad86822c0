"""The fuzzing harness shared by the reliability tests and bench/reliability/fuzz.py.

`FUZZ_EXAMPLES` (examples per operation and generation mode) and `FUZZ_SEED` size a run: the defaults keep
`make test` short; the bench raises them. `FUZZ_REPORT` names a JSON-lines file each fuzz test appends its
tally to (operations, examples, failures), for the bench's table.
"""

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

DEFAULT_EXAMPLES = 5


def examples_per_operation(default: int = DEFAULT_EXAMPLES) -> int:
    return int(os.environ.get("FUZZ_EXAMPLES") or default)


def fuzz_seed() -> int:
    return int(os.environ.get("FUZZ_SEED") or 0)


def fuzz_settings(examples: int) -> settings:
    """Deterministic (a fixed seed, no example database), no deadline (the first request of a view warms
    caches), health checks off (function-scoped fixtures and slow examples are intended), and shrinking
    kept short so a failure is reported soon with a small example."""
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        report_multiple_bugs=False,
        print_blob=False,
    )


@dataclass
class Tally:
    """What one fuzz run covered and found."""

    name: str
    operations: list[str] = field(default_factory=list)
    examples: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def count(self, status: int) -> None:
        self.examples += 1
        key = f"{status // 100}xx"
        self.statuses[key] = self.statuses.get(key, 0) + 1

    def write_report(self) -> None:
        path = os.environ.get("FUZZ_REPORT")
        if not path:
            return
        with open(path, "a") as report:
            report.write(
                json.dumps(
                    {
                        "name": self.name,
                        "operations": len(self.operations),
                        "examples": self.examples,
                        "statuses": self.statuses,
                        "failures": self.failures,
                        "seconds": round(self.seconds, 1),
                    }
                )
                + "\n"
            )

    def assert_clean(self) -> None:
        self.write_report()
        assert not self.failures, f"{len(self.failures)} finding(s) of {self.name}:\n\n" + "\n\n".join(
            self.failures
        )


def run_strategy(
    tally: Tally, label: str, strategy: st.SearchStrategy, check: Callable, *, examples: int
) -> None:
    """Runs `check` on `examples` values drawn from `strategy`; the first failure (shrunk) goes into the
    tally under `label` instead of stopping the run, so one run lists every operation that fails."""
    started = time.perf_counter()

    @seed(fuzz_seed())
    @fuzz_settings(examples)
    @given(strategy)
    def run(value):
        check(value)

    try:
        run()
    except (Exception, BaseExceptionGroup) as error:  # schemathesis reports check failures as a group
        message = str(error).strip() or repr(error)
        tally.failures.append(f"[{label}] {type(error).__name__}: {message[:3000]}")
    finally:
        tally.seconds += time.perf_counter() - started
