"""The one place that reads the process environment.

Every setting that comes from the environment goes through these helpers, so a missing or malformed
value fails at start-up with a message naming the variable instead of deep inside a request. Elsewhere the
environment is only written (DJANGO_SETTINGS_MODULE's default, the test session's names) or copied into the
environment of a process launched (areal_web.processes, workers/inference/vllm.py). The Django-free code in
workers/ imports nothing from here: its callers pass it the values, except where it is a process of its own
(the inference server's admin token and model store, torchrun's LOCAL_RANK).
"""

import os
import secrets
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlparse


class ConfigurationError(RuntimeError):
    """A required environment variable is missing or malformed."""


_MISSING = object()


def env_str(name: str, default=_MISSING) -> str:
    value = os.environ.get(name)
    if value is None or value == "":
        if default is _MISSING:
            raise ConfigurationError(f"environment variable {name} is required but not set")
        return default
    return value


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ConfigurationError(f"environment variable {name}={value!r} is not a boolean (use true or false)")


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ConfigurationError(f"environment variable {name}={value!r} is not an integer") from None


def env_choice(name: str, choices: tuple[str, ...], default: str) -> str:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    if value.strip() not in choices:
        raise ConfigurationError(f"environment variable {name}={value!r} must be one of {', '.join(choices)}")
    return value.strip()


def env_list(name: str, default: list[str] | None = None) -> list[str]:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return list(default or [])
    return [item.strip() for item in value.split(",") if item.strip()]


def env_int_map(name: str, default: dict[str, int] | None = None) -> dict[str, int]:
    """`KEY=INTEGER,KEY=INTEGER` (for example `/api/v1/trajectories/import/=67108864`), merged over `default`."""
    result = dict(default or {})
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return result
    for item in value.split(","):
        if not item.strip():
            continue
        key, separator, number = item.strip().rpartition("=")
        try:
            if not separator or not key:
                raise ValueError
            result[key.strip()] = int(number)
        except ValueError:
            raise ConfigurationError(
                f"environment variable {name}: {item.strip()!r} is not KEY=INTEGER"
            ) from None
    return result


def generated_secret(path: Path) -> str:
    """A random secret kept in `path` (0600), created on first use; concurrent first uses agree on one."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    candidate = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    descriptor = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(secrets.token_urlsafe(32))
    try:
        os.link(candidate, path)  # atomic: the first process to link wins, the others read its secret
    except FileExistsError:
        pass
    finally:
        candidate.unlink()
    return path.read_text().strip()


def parse_database_url(url: str) -> dict:
    """Turns `postgres://user:pass@host:port/name?sslmode=require` into a Django DATABASES entry."""
    parsed = urlparse(url)
    if parsed.scheme not in {"postgres", "postgresql", "pgsql"}:
        raise ConfigurationError(
            f"DATABASE_URL scheme {parsed.scheme!r} is not supported; use postgres://user@host:port/name"
        )
    name = unquote(parsed.path.lstrip("/"))
    if not name:
        raise ConfigurationError("DATABASE_URL names no database (postgres://user@host:port/NAME)")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": unquote(parsed.username or ""),
        "PASSWORD": unquote(parsed.password or ""),
        "HOST": parsed.hostname or "",
        "PORT": str(parsed.port or ""),
        "OPTIONS": dict(parse_qsl(parsed.query)),
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
    }
