"""Test settings.

With CI=true the suite must run on the real services the CI machine provides: PostgreSQL and Redis
default to 127.0.0.1 and tests/conftest.py fails the run, rather than skipping, if either is missing.
Without CI the suite runs embedded (SQLite, filesystem broker, in-memory channel layer).
"""

import os
from pathlib import Path

from areal_web.env import env_bool, env_choice, env_list, env_str

# Under pytest-xdist each worker is a test session of its own. It inherits the controller's environment, so the
# names below that the controller chose are dropped and the worker takes its own; the processes a worker starts
# inherit the worker's names, as the processes of a plain run inherit that run's.
_XDIST_WORKER = env_str("PYTEST_XDIST_WORKER", "")
if _XDIST_WORKER and env_str("AREAL_TEST_SESSION_WORKER", "") != _XDIST_WORKER:
    for _name in (
        "AREAL_VAR_DIR",
        "AREAL_TEST_DATABASE_NAME",
        "AREAL_CHANNEL_PREFIX",
        "AREAL_CACHE_PREFIX",
        "AREAL_BROKER_PREFIX",
        "PROMETHEUS_MULTIPROC_DIR",  # base.py sets it under the var folder: the controller's would be shared
    ):
        os.environ.pop(_name, None)
    os.environ["AREAL_TEST_SESSION_WORKER"] = _XDIST_WORKER

# Each test session keeps its files (SQLite test database, embedded broker, cache, journal) in its own
# folder, apart from a running stack's and from any other test session's; processes the tests start
# inherit the variable and so share it. tests/conftest.py removes the folder at the end.
os.environ.setdefault(
    "AREAL_VAR_DIR", str(Path(__file__).resolve().parents[2] / "var" / "test" / f"run-{os.getpid()}")
)

if env_bool("CI", False):
    os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/areal")
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/11")
    # Two test sessions on one machine (a developer's run beside CI's) must not share a test database, cache
    # keys, Celery queues or channel groups: each takes names of its own, inherited by the processes it starts.
    os.environ.setdefault("AREAL_TEST_DATABASE_NAME", f"test_areal_{os.getpid()}")
    os.environ.setdefault("AREAL_CHANNEL_PREFIX", f"areal-test-{os.getpid()}")
    os.environ.setdefault("AREAL_CACHE_PREFIX", f"areal-test-{os.getpid()}")
    os.environ.setdefault("AREAL_BROKER_PREFIX", f"areal-test-{os.getpid()}:")

from areal_web.settings.base import *  # noqa: E402, F403
from areal_web.settings.base import DATABASES  # noqa: E402

DEBUG = False
# Test servers listen on random loopback ports; the tests of the allow-list set the embedded default themselves.
AREAL_BACKEND_ALLOWED_HOSTS = env_list("AREAL_BACKEND_ALLOWED_HOSTS", ["127.0.0.1:*", "[::1]:*"])
# ... and every tenant may register them (apps/inference/grants.py); the tests of grants set their own.
AREAL_BACKEND_GRANTS = env_list("AREAL_BACKEND_GRANTS", ["*=127.0.0.1:*", "*=[::1]:*"])
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # A file, not :memory:, so that worker processes and the live server see the same test database.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}  # noqa: F405
elif env_str("AREAL_TEST_DATABASE_NAME", ""):
    DATABASES["default"]["TEST"] = {"NAME": env_str("AREAL_TEST_DATABASE_NAME")}

# Worker processes started by the tests must use the test database the suite created.
if env_bool("AREAL_USE_TEST_DATABASE", False):
    _default = DATABASES["default"]
    _default["NAME"] = _default.get("TEST", {}).get("NAME") or f"test_{_default['NAME']}"
# The journal's batches stored by the web process's own thread: a test's rows, inside its transaction, are
# invisible to a recorder process (tests/gateway/test_recorder.py starts one on committed rows).
AREAL_GATEWAY_RECORDER = env_choice("AREAL_GATEWAY_RECORDER", ("process", "thread"), "thread")
# No persistent connections: threads of async tests must not hold the test database open at teardown.
DATABASES["default"]["CONN_MAX_AGE"] = 0

# The ASGI application the tests serve (uvicorn) finds static files where they are, as `make run` does
# with DEBUG on; production serves the collected, hashed files instead.
WHITENOISE_USE_FINDERS = True
