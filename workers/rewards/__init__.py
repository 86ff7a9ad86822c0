"""Django-free reward logic: spec checks, source combination, evaluators and agreement statistics."""
