"""Template filters of the console's pages (`{% load console %}`).

`pairs`: a dict's (key, value) pairs for `{% for key, value in data|pairs %}`. Why not `data.items`: Django's
template engine looks `items` up as a key before it calls the method, so a dict that holds an `items` key (an
annotation queue's audit event, a reward label a tenant named `items`) renders that value instead, and the
page fails. Every dict whose keys a user or a tenant can name goes through `pairs`.
"""

from collections.abc import Mapping

from django import template

register = template.Library()


@register.filter
def pairs(value) -> list[tuple]:
    """`value`'s (key, value) pairs in its own order when it is a mapping, else none."""
    return list(value.items()) if isinstance(value, Mapping) else []
