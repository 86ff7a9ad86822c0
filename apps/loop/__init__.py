"""The loop's orchestration: the flows that span apps (docs/architecture.md, "Layers").

Not a Django app (no models, no migrations): each module composes the services and selectors of the domain
apps below it, and nothing below imports it. Entry points (tasks, REST, console pages) call it.
"""
