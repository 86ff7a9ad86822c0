"""Template filters of the evolution control plane's words (`{% load evolution %}`).

`gate_scores`: a model version's offline gate scores in sentences ("weather held-out: 33 % of 20 cases"), for
the models page, which shows each version's evaluations (apps/evolution/gate_words.py says them)."""

from django import template

from apps.evolution.gate_words import version_gate_scores

register = template.Library()


@register.filter
def gate_scores(version) -> list[str]:
    """`version`'s gate scores, one sentence each; none for a version no gate measured."""
    return version_gate_scores(getattr(version, "metrics", None))
