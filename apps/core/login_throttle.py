"""Refuses sign-in after repeated failures for one username or one client address within a window."""

from django.conf import settings
from django.core.cache import cache


def _keys(username: str, address: str) -> list[str]:
    return [f"login-fail:user:{username.strip().lower()}", f"login-fail:addr:{address}"]


def login_throttled(*, username: str, address: str) -> bool:
    counts = cache.get_many(_keys(username, address))
    return any(count >= settings.AREAL_LOGIN_MAX_FAILURES for count in counts.values())


def login_failed(*, username: str, address: str) -> None:
    for key in _keys(username, address):
        if not cache.add(key, 1, settings.AREAL_LOGIN_WINDOW_SECONDS):
            try:
                cache.incr(key)
            except ValueError:
                cache.add(key, 1, settings.AREAL_LOGIN_WINDOW_SECONDS)


def login_succeeded(*, username: str, address: str) -> None:
    cache.delete(_keys(username, address)[0])
