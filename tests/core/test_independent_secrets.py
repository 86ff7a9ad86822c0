"""Django's SECRET_KEY, the backend credentials' key (AREAL_SECRETS_KEY) and the inference admin secret
(AREAL_INFERENCE_ADMIN_SECRET) are independent: none is derived from another. Embedded, each is generated into the
var folder on its own; production refuses to start without each, or with two of them equal. Through the settings
as a started process reads them (manage.py in a subprocess)."""

import hashlib
import json
import os
import subprocess
import sys

import pytest

from tests.core.test_settings import ROOT, SAFE, _run_check

PRINT_SECRETS = (
    "import json, hashlib; from django.conf import settings as s; "
    "print(json.dumps({name: hashlib.sha256(getattr(s, name).encode()).hexdigest() for name in "
    "('SECRET_KEY', 'AREAL_SECRETS_KEY', 'AREAL_INFERENCE_ADMIN_SECRET')}))"
)


def embedded_secrets(var_dir, **environment) -> dict:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "AREAL_", "DATABASE_URL", "REDIS_URL", "CI"))
    }
    env.update(
        {"DJANGO_SETTINGS_MODULE": "areal_web.settings.local", "AREAL_VAR_DIR": str(var_dir), **environment}
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", PRINT_SECRETS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_secret_key_derives_neither_the_credentials_key_nor_the_admin_secret(tmp_path):
    first = embedded_secrets(tmp_path, DJANGO_SECRET_KEY="a" * 50)
    second = embedded_secrets(tmp_path, DJANGO_SECRET_KEY="b" * 50)
    assert first["SECRET_KEY"] != second["SECRET_KEY"]
    # Changing Django's key changes neither of the others: they are the var folder's own generated secrets.
    assert (first["AREAL_SECRETS_KEY"], first["AREAL_INFERENCE_ADMIN_SECRET"]) == (
        second["AREAL_SECRETS_KEY"],
        second["AREAL_INFERENCE_ADMIN_SECRET"],
    )
    assert len(set(first.values())) == 3
    generated = {path.name for path in tmp_path.iterdir()}
    assert {"secrets-key", "inference-admin-secret"} <= generated


def test_the_embedded_default_generates_three_different_secrets(tmp_path):
    secrets = embedded_secrets(tmp_path)
    assert len(set(secrets.values())) == 3
    assert (
        secrets["SECRET_KEY"]
        != hashlib.sha256(b"insecure-embedded-default-do-not-use-in-production").hexdigest()
    )
    assert embedded_secrets(tmp_path) == secrets  # kept in the var folder


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"AREAL_SECRETS_KEY": ""}, "AREAL_SECRETS_KEY is required"),
        ({"AREAL_INFERENCE_ADMIN_SECRET": ""}, "AREAL_INFERENCE_ADMIN_SECRET is required"),
        ({"AREAL_SECRETS_KEY": SAFE["DJANGO_SECRET_KEY"]}, "three different secrets"),
        ({"AREAL_INFERENCE_ADMIN_SECRET": SAFE["AREAL_SECRETS_KEY"]}, "three different secrets"),
    ],
)
def test_production_requires_each_secret_of_its_own(overrides, message):
    result = _run_check({**SAFE, **overrides})
    assert result.returncode != 0
    assert message in result.stderr
