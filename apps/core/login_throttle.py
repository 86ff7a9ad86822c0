"""Sign-in throttling for every sign-in form (the console's and the Django admin's): an authentication
backend counts each attempt before the password is checked, per (username, client address) and per
client address, in counters shared by every process (`apps.core.counters`).

- Per (username, address): `AREAL_LOGIN_MAX_FAILURES` attempts per `AREAL_LOGIN_WINDOW_SECONDS`. An attacker
  guessing a user's password locks out only their own address, never the user signing in elsewhere.
- Per address: `AREAL_LOGIN_MAX_FAILURES_PER_ADDRESS` failed attempts per window, whatever the usernames
  (password spraying from one address).
- The attempt is counted first and the limit checked on the counted value, so concurrent attempts cannot
  all pass a check made before any of them is counted. A successful sign-in clears its pair's count and
  gives its attempt back to the address's.

The address is REMOTE_ADDR: behind a reverse proxy, every client shares the proxy's address, so the
per-address limit then applies to all clients together (the per-pair limit to each username).
"""

import hashlib

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import PermissionDenied

from apps.core.counters import counter_add, counter_delete


def client_address(request) -> str:
    return request.META.get("REMOTE_ADDR", "")


def _keys(username: str, address: str) -> tuple[str, str]:
    name = hashlib.sha256(username.strip().lower().encode()).hexdigest()[:32]
    return f"login-attempts:pair:{name}:{address}", f"login-attempts:addr:{address}"


def login_attempt_begin(*, username: str, address: str) -> bool:
    """Counts one sign-in attempt; False when the pair or the address is over its limit (refuse it)."""
    pair_key, address_key = _keys(username, address)
    window = settings.AREAL_LOGIN_WINDOW_SECONDS
    pair = counter_add(key=pair_key, window_seconds=window)
    per_address = counter_add(key=address_key, window_seconds=window)
    return (
        pair <= settings.AREAL_LOGIN_MAX_FAILURES
        and per_address <= settings.AREAL_LOGIN_MAX_FAILURES_PER_ADDRESS
    )


def login_attempt_succeeded(*, username: str, address: str) -> None:
    pair_key, address_key = _keys(username, address)
    counter_delete(key=pair_key)
    counter_add(key=address_key, amount=-1, window_seconds=settings.AREAL_LOGIN_WINDOW_SECONDS)


class ThrottledModelBackend(ModelBackend):
    """Django's model backend behind the throttle. A refused attempt raises PermissionDenied, which stops
    `authenticate()` (no other backend is tried) and marks the request so the form can say why."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None or username is None:
            return super().authenticate(request, username=username, password=password, **kwargs)
        address = client_address(request)
        if not login_attempt_begin(username=username, address=address):
            request.login_throttled = True
            raise PermissionDenied("sign-in throttled")
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is not None:
            login_attempt_succeeded(username=username, address=address)
        return user


def login_throttled(request) -> bool:
    """Whether the sign-in attempt of this request was refused by the throttle."""
    return getattr(request, "login_throttled", False)


class _ThrottleMessage:
    def get_invalid_login_error(self):
        if self.request is not None and login_throttled(self.request):
            minutes = max(1, round(settings.AREAL_LOGIN_WINDOW_SECONDS / 60))
            return forms.ValidationError(
                f"Too many failed sign-in attempts. Wait {minutes} minutes, then try again.", code="throttled"
            )
        return super().get_invalid_login_error()


class ThrottledAuthenticationForm(_ThrottleMessage, AuthenticationForm):
    """The console's sign-in form: says so when the throttle refused the attempt."""


class ThrottledAdminAuthenticationForm(_ThrottleMessage, AdminAuthenticationForm):
    """The Django admin's sign-in form (installed on `admin.site` in apps/core/admin.py)."""
