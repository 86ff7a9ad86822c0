import os
import subprocess
import sys
from pathlib import Path

import pytest

from areal_web.env import ConfigurationError, env_bool, env_int, parse_database_url

ROOT = Path(__file__).resolve().parents[2]


def _run_check(env_overrides: dict, *args) -> subprocess.CompletedProcess:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "DATABASE_URL", "REDIS_URL", "CI"))
    }
    env.update({"DJANGO_SETTINGS_MODULE": "areal_web.settings.production", **env_overrides})
    return subprocess.run(
        [sys.executable, "manage.py", "check", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


SAFE = {
    "DJANGO_SECRET_KEY": "x" * 64 + "-production-secret-for-the-check",
    "AREAL_SECRETS_KEY": "y" * 64 + "-credentials-secret-for-the-check",
    "AREAL_INFERENCE_ADMIN_SECRET": "z" * 64 + "-inference-admin-secret-for-the-check",
    "DJANGO_ALLOWED_HOSTS": "areal.example.com",
}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"DJANGO_SECRET_KEY": ""}, "DJANGO_SECRET_KEY is required"),
        ({"DJANGO_ALLOWED_HOSTS": ""}, "DJANGO_ALLOWED_HOSTS is empty"),
        ({"DJANGO_DEBUG": "true"}, "DJANGO_DEBUG must be off"),
    ],
)
def test_production_refuses_unsafe_configuration(overrides, message):
    result = _run_check({**SAFE, **overrides})
    assert result.returncode != 0
    assert message in result.stderr


def test_production_passes_check_deploy():
    result = _run_check(SAFE, "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stderr + result.stdout


def test_env_helpers_name_the_variable(monkeypatch):
    monkeypatch.setenv("AREAL_SOME_FLAG", "perhaps")
    with pytest.raises(ConfigurationError, match="AREAL_SOME_FLAG"):
        env_bool("AREAL_SOME_FLAG")
    monkeypatch.setenv("AREAL_SOME_NUMBER", "ten")
    with pytest.raises(ConfigurationError, match="AREAL_SOME_NUMBER"):
        env_int("AREAL_SOME_NUMBER", 1)


def test_database_url_parsing():
    entry = parse_database_url("postgres://postgres:s%40cret@127.0.0.1:5432/areal?sslmode=disable")
    assert entry["ENGINE"] == "django.db.backends.postgresql"
    assert (entry["USER"], entry["PASSWORD"], entry["HOST"], entry["PORT"], entry["NAME"]) == (
        "postgres",
        "s@cret",
        "127.0.0.1",
        "5432",
        "areal",
    )
    assert entry["OPTIONS"] == {"sslmode": "disable"}
    with pytest.raises(ConfigurationError, match="not supported"):
        parse_database_url("mysql://root@localhost/x")


def test_ci_mode_uses_real_services():
    """With CI=true the settings point at PostgreSQL and Redis; conftest fails the run if they are down."""
    from django.conf import settings

    if os.environ.get("CI", "").lower() != "true":
        assert settings.DATABASES["default"]["ENGINE"].endswith("sqlite3") or os.environ.get("DATABASE_URL")
        return
    assert settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
    assert settings.CELERY_BROKER_URL.startswith("redis://")
    assert settings.CHANNEL_LAYERS["default"]["BACKEND"] == "channels_redis.core.RedisChannelLayer"
