import os
import socket

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from apps.audit.services import Actor
from apps.tenants.permissions import Role
from apps.tenants.services import api_key_create
from tests.tenants.factories import MembershipFactory, TenantFactory

UNMEASURED_FILE_SECONDS = 5  # a file new since durations.json was recorded


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def pytest_sessionstart(session):
    """On CI the suite must run against real PostgreSQL and Redis: missing services fail the run."""
    if os.environ.get("CI", "").lower() not in {"1", "true", "yes"}:
        return
    from django.conf import settings

    database = settings.DATABASES["default"]
    problems = []
    if not database["ENGINE"].endswith("postgresql"):
        problems.append(f"CI=true but the database engine is {database['ENGINE']}")
    elif not _reachable(database["HOST"] or "127.0.0.1", int(database["PORT"] or 5432)):
        problems.append(f"PostgreSQL is not reachable at {database['HOST']}:{database['PORT']}")
    if not settings.REDIS_URL:
        problems.append("CI=true but REDIS_URL is empty")
    else:
        import redis

        try:
            redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2).ping()
        except redis.RedisError as error:
            problems.append(f"Redis is not reachable at {settings.REDIS_URL}: {error}")
    if problems:
        raise pytest.UsageError("required CI services missing:\n  " + "\n  ".join(problems))


def pytest_sessionfinish(session, exitstatus):
    """Removes this session's own var folder (see areal_web/settings/test.py)."""
    import shutil

    from django.conf import settings as django_settings

    if django_settings.VAR_DIR.name.startswith("run-"):
        shutil.rmtree(django_settings.VAR_DIR, ignore_errors=True)


@pytest.fixture(scope="session")
def django_db_modify_db_settings_xdist_suffix():
    """Each pytest-xdist worker names its own test database already (areal_web/settings/test.py), a name that
    the processes it starts inherit; pytest-django's `_gw<n>` suffix would hide the database from them."""


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's setup, plus: before the test database is dropped, connections that threads of the
    suite left open to it (a live server's, an executor's) are ended, so the drop succeeds and no
    `test_areal_<pid>` database is left behind on PostgreSQL."""
    yield
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    connection.close()


def _local_name(host) -> bool:
    import ipaddress

    name = (host.decode() if isinstance(host, bytes) else host or "").rstrip(".").lower()
    if name in ("", "localhost") or name.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(name.strip("[]").split("%")[0])
        return (
            True  # a literal: no lookup (and the connection guard of tests/network.py covers where it goes)
        )
    except ValueError:
        return False


@pytest.fixture(scope="session", autouse=True)
def _no_name_lookups_off_this_machine():
    """Tests send nothing off this machine, DNS queries included: a host name (a fuzzed backend URL, say) is
    answered "does not resolve" here instead of asking the machine's resolver."""
    real = socket.getaddrinfo

    def guarded(host, *args, **kwargs):
        if not _local_name(host):
            raise socket.gaierror(
                socket.EAI_NONAME, f"test guard: no name lookups off this machine ({host!r})"
            )
        return real(host, *args, **kwargs)

    socket.getaddrinfo = guarded
    yield
    socket.getaddrinfo = real


def pytest_collection_modifyitems(config, items):
    """Files with browser tests run last, after every async test, and the browser tests of a file after its
    others. Within each of the two groups the files that took longest in a recent run come first
    (tests/durations.py): `make test` hands files to its workers in this order (`--no-loadscope-reorder`), so
    the run ends on short files on both workers instead of one long file on one."""
    from tests.durations import file_seconds

    seconds = file_seconds()
    browser_files = {item.path for item in items if item.get_closest_marker("browser")}

    def order(item):
        path = str(item.path.relative_to(config.rootpath))
        return (
            item.path in browser_files,
            -seconds.get(path, UNMEASURED_FILE_SECONDS),
            path,
            item.get_closest_marker("browser") is not None,
        )

    items.sort(key=order)


def clear_cache():
    """Empties this session's cache and shared state (apps.core.shared_state). On Redis only this session's keys go: `cache.clear()` would FLUSHDB the
    database the Celery broker and the channel layer share, under any other test session on the machine."""
    from django.conf import settings

    if not settings.REDIS_URL:
        from apps.core.shared_state import shared_clear

        cache.clear()
        shared_clear()  # the embedded store of the state web processes share (on Redis: among these keys)
        return
    client = cache._cache.get_client(write=True)
    prefix = settings.CACHES["default"].get("KEY_PREFIX") or ""
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    if keys:
        client.delete(*keys)


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_cache()
    yield
    clear_cache()


@pytest.fixture
def tenant(db):
    return TenantFactory(slug="acme", name="Acme")


@pytest.fixture
def other_tenant(db):
    return TenantFactory(slug="globex", name="Globex")


@pytest.fixture
def member(tenant):
    """member(role) → a user with that role in `tenant`."""

    def make(role=Role.ADMIN, *, of=None):
        return MembershipFactory(tenant=of or tenant, role=role).user

    return make


@pytest.fixture
def admin_user(member):
    return member(Role.ADMIN)


@pytest.fixture
def api_client(tenant):
    """api_client(scopes=[...]) → an APIClient authenticated with a new key of `tenant`;
    api_client(user=u) → one signed in as u (session auth)."""

    def make(scopes=None, *, user=None, of=None):
        client = APIClient()
        if user is not None:
            client.force_login(user)
            return client
        _, raw = api_key_create(
            tenant=of or tenant,
            actor=Actor.system("test"),
            name=f"test-{os.urandom(4).hex()}",
            scopes=list(scopes or ["admin"]),
        )
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        client.raw_key = raw
        return client

    return make
