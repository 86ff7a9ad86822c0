"""The embedded default for a laptop or the demo: DEBUG on, no services required."""

from areal_web.env import env_bool
from areal_web.settings.base import *  # noqa: F403

DEBUG = env_bool("DJANGO_DEBUG", True)

# Django's debug page on a server error (the traceback, the installation's paths and settings) only when the
# operator asked for it by setting DJANGO_DEBUG: DEBUG's default above is on for the embedded stack's
# conveniences, not to show every signed-in member the debug page (apps/console/errors.py).
AREAL_DEBUG_ERROR_PAGE = env_bool("DJANGO_DEBUG", False)
MIDDLEWARE = ["apps.console.errors.PlainServerErrors", *MIDDLEWARE]  # noqa: F405
