"""The evolution control plane's compute that needs no database: signal formulas, drift, tool-failure
clustering, the rules, the harness transformation and the proposers. Django-free: the apps convert rows into
these dataclasses and back (see apps/evolution/README.md)."""
