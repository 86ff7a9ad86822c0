"""The embedded default for a laptop or the demo: DEBUG on, no services required."""

from areal_web.env import env_bool
from areal_web.settings.base import *  # noqa: F403

DEBUG = env_bool("DJANGO_DEBUG", True)
