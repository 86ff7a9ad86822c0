"""Sign-in throttling through the sign-in pages (console and Django admin): counted per (username, client
address), so an attacker cannot lock a user out from another address; counted atomically, before the
password is checked, so concurrent guesses cannot slip past the limit; shared through the cache."""

import threading
import time

import pytest
from django.contrib.auth.hashers import MD5PasswordHasher
from django.test import Client

from apps.core.counters import counter_add, counter_value
from tests.tenants.factories import PASSWORD, UserFactory

ATTACKER = "127.0.0.2"
USER_ADDRESS = "127.0.0.3"


def _console_sign_in(username, password, address):
    return Client(REMOTE_ADDR=address).post("/login/", {"username": username, "password": password})


@pytest.mark.django_db
def test_an_attacker_cannot_lock_the_user_out_from_another_address(admin_user, settings):
    for _ in range(settings.AREAL_LOGIN_MAX_FAILURES):
        assert _console_sign_in(admin_user.username, "wrong", ATTACKER).status_code == 200
    refused = _console_sign_in(admin_user.username, PASSWORD, ATTACKER)
    assert refused.status_code == 429
    assert b"Too many failed sign-in attempts" in refused.content

    from_elsewhere = _console_sign_in(admin_user.username, PASSWORD, USER_ADDRESS)
    assert from_elsewhere.status_code == 302


@pytest.mark.django_db
def test_one_address_guessing_many_usernames_is_throttled(member, settings):
    settings.AREAL_LOGIN_MAX_FAILURES_PER_ADDRESS = 6
    users = [member() for _ in range(4)]
    for user in users[:3]:
        for _ in range(2):
            assert _console_sign_in(user.username, "wrong", ATTACKER).status_code == 200
    assert _console_sign_in(users[3].username, PASSWORD, ATTACKER).status_code == 429
    assert _console_sign_in(users[3].username, PASSWORD, USER_ADDRESS).status_code == 302


@pytest.mark.django_db
def test_a_successful_sign_in_clears_its_failures(admin_user, settings):
    for _ in range(settings.AREAL_LOGIN_MAX_FAILURES - 1):
        _console_sign_in(admin_user.username, "wrong", USER_ADDRESS)
    assert _console_sign_in(admin_user.username, PASSWORD, USER_ADDRESS).status_code == 302
    for _ in range(settings.AREAL_LOGIN_MAX_FAILURES - 1):
        assert _console_sign_in(admin_user.username, "wrong", USER_ADDRESS).status_code == 200
    assert _console_sign_in(admin_user.username, PASSWORD, USER_ADDRESS).status_code == 302


@pytest.mark.django_db
def test_the_django_admin_sign_in_is_throttled(settings):
    staff = UserFactory(username="root", email="root@example.test", is_staff=True, is_superuser=True)
    client = Client(REMOTE_ADDR=ATTACKER)
    for _ in range(settings.AREAL_LOGIN_MAX_FAILURES):
        failed = client.post(
            "/django-admin/login/",
            {"username": staff.username, "password": "wrong", "next": "/django-admin/"},
        )
        assert failed.status_code == 200
    refused = client.post(
        "/django-admin/login/", {"username": staff.username, "password": PASSWORD, "next": "/django-admin/"}
    )
    assert refused.status_code == 429
    assert b"Too many failed sign-in attempts" in refused.content
    assert "_auth_user_id" not in client.session
    assert client.get("/django-admin/").status_code == 302  # still signed out

    other = Client(REMOTE_ADDR=USER_ADDRESS)
    assert (
        other.post(
            "/django-admin/login/",
            {"username": staff.username, "password": PASSWORD, "next": "/django-admin/"},
        ).status_code
        == 302
    )
    assert other.get("/django-admin/").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_concurrent_guesses_are_all_counted(admin_user, settings, monkeypatch):
    """Twenty guesses in flight at once, each slow to check: only the limit's worth reach the password check,
    the rest are refused, and the next attempt (even with the right password) is refused too."""
    real_verify = MD5PasswordHasher.verify

    def slow_verify(self, password, encoded):
        time.sleep(0.3)
        return real_verify(self, password, encoded)

    monkeypatch.setattr(MD5PasswordHasher, "verify", slow_verify)
    attempts = 4 * settings.AREAL_LOGIN_MAX_FAILURES
    barrier = threading.Barrier(attempts)
    statuses = []

    def guess():
        barrier.wait()
        statuses.append(_console_sign_in(admin_user.username, "wrong", ATTACKER).status_code)

    threads = [threading.Thread(target=guess) for _ in range(attempts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert sorted(statuses) == [200] * settings.AREAL_LOGIN_MAX_FAILURES + [429] * (
        attempts - settings.AREAL_LOGIN_MAX_FAILURES
    )
    assert _console_sign_in(admin_user.username, PASSWORD, ATTACKER).status_code == 429


@pytest.mark.django_db(transaction=True)
def test_shared_counter_loses_no_increment_under_concurrency():
    workers, each = 8, 50

    def bump():
        for _ in range(each):
            counter_add(key="test-counter", window_seconds=60)

    threads = [threading.Thread(target=bump) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert counter_value(key="test-counter") == workers * each
