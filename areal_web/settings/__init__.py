"""Settings package: base (shared), local (embedded default), test, production."""
