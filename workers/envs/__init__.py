"""Demo environments: agent tasks whose success a program checks (no Django)."""
