"""Reading the Prometheus exposition in tests."""

import re

from apps.metrics.exposition import render

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text: str) -> tuple[dict, dict]:
    """(types by family, {(name, frozenset(labels)): value}); fails on any line that is not valid."""
    types, samples = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
        elif line.startswith("# HELP ") or not line:
            continue
        else:
            match = SAMPLE.match(line)
            assert match, f"not an exposition line: {line!r}"
            name, labels, value = match.groups()
            samples[(name, frozenset(LABEL.findall(labels or "")))] = float(value)
    return types, samples


def sample(name: str, **labels) -> float:
    """The current value of one sample of the process metrics (0 when absent)."""
    _, samples = parse(render().decode())
    return samples.get((name, frozenset(labels.items())), 0.0)
