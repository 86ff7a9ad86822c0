"""Django-free evaluation compute: case scorers, candidate-vs-baseline comparison (bootstrap confidence
intervals, per-case flips) and guardrail verdicts for canary analysis. Plain values in, frozen dataclasses out."""
