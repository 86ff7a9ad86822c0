"""The evolution control plane's compute that needs no database (see apps/evolution/README.md)."""
