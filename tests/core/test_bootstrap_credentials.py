"""`manage.py bootstrap` writes the first-start credentials file readable by its owner only from the moment
it exists: created with mode 0600, never written world-readable and tightened afterwards."""

import os
import pathlib
import stat

import pytest
from django.core.management import call_command

pytestmark = pytest.mark.django_db


@pytest.fixture
def permissive_umask():
    previous = os.umask(0)
    yield
    os.umask(previous)


@pytest.fixture
def no_late_chmod(monkeypatch):
    """A chmod after the file exists would leave a window: make any such call a no-op, so only the mode the
    file was created with counts."""
    calls = []
    monkeypatch.setattr(os, "chmod", lambda *args, **kwargs: calls.append(args))
    monkeypatch.setattr(pathlib.Path, "chmod", lambda self, *args, **kwargs: calls.append((self, *args)))
    return calls


def _mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_the_credentials_file_is_created_owner_only(
    settings, tmp_path, permissive_umask, no_late_chmod, capsys
):
    settings.VAR_DIR = tmp_path
    call_command("bootstrap", username="first-admin", tenant="first")
    credentials = tmp_path / "first-start-credentials.txt"
    assert _mode(credentials) == 0o600
    text = credentials.read_text()
    assert text.startswith("username: first-admin\npassword: ")
    assert len(text.split("password: ")[1].strip()) >= 12
    assert "first-admin" in capsys.readouterr().out


def test_an_older_world_readable_file_or_a_planted_link_is_replaced(
    settings, tmp_path, permissive_umask, no_late_chmod
):
    settings.VAR_DIR = tmp_path
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("untouched\n")
    (tmp_path / "first-start-credentials.txt").symlink_to(elsewhere)
    call_command("bootstrap", username="admin-two", tenant="second")
    credentials = tmp_path / "first-start-credentials.txt"
    assert not credentials.is_symlink()
    assert _mode(credentials) == 0o600
    assert elsewhere.read_text() == "untouched\n"
    assert "admin-two" in credentials.read_text()
