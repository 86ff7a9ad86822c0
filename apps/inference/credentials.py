"""Backend credentials: a hosted provider's API key, stored encrypted, sent only to that backend.

Encryption is Fernet (AES-128-CBC with HMAC-SHA256, from `cryptography`) under a key derived by SHA-256 from
`settings.AREAL_SECRETS_KEY`; `AREAL_SECRETS_PREVIOUS_KEYS` are tried too when decrypting, so the secret can be
changed without losing what is stored. The plaintext exists only in memory on its way to a backend: the API and
the console show whether a credential is set and its last four characters; audit events, logs and error
messages never carry it.

How a credential is sent depends on the backend's kind: `Authorization: Bearer <credential>` for
OpenAI-compatible servers (hosted APIs, vLLM's `--api-key`), `x-api-key: <credential>` with `anthropic-version`
for the Anthropic Messages API.
"""

import base64
import hashlib
import re

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings

from apps.core.errors import ValidationFailed

ANTHROPIC_VERSION = "2023-06-01"
ANTHROPIC_KIND = "anthropic"
# Visible ASCII only: a credential goes into an HTTP header, so no spaces, control characters or line breaks.
_CREDENTIAL = re.compile(r"[\x21-\x7e]{8,4096}")
_fernets: dict[tuple[str, ...], MultiFernet] = {}


class CredentialUnreadable(Exception):
    """The stored credential cannot be decrypted with this deployment's secrets (AREAL_SECRETS_KEY changed
    without listing the old one in AREAL_SECRETS_PREVIOUS_KEYS)."""

    message = (
        "the backend's stored credential cannot be decrypted with this deployment's AREAL_SECRETS_KEY; "
        "an admin must set it again"
    )

    def __str__(self) -> str:
        return self.message


def _fernet_key(secret: str) -> bytes:
    return base64.urlsafe_b64encode(hashlib.sha256(b"areal-backend-credentials:" + secret.encode()).digest())


def _cipher() -> MultiFernet:
    secrets = (settings.AREAL_SECRETS_KEY, *settings.AREAL_SECRETS_PREVIOUS_KEYS)
    cipher = _fernets.get(secrets)
    if cipher is None:
        cipher = _fernets[secrets] = MultiFernet([Fernet(_fernet_key(secret)) for secret in secrets])
    return cipher


def credential_validate(credential: str) -> str:
    """The credential as it will be stored, or ValidationFailed on the field `credential` (the value is never
    repeated in the message)."""
    if not isinstance(credential, str) or not _CREDENTIAL.fullmatch(credential):
        raise ValidationFailed(
            "a credential is 8 to 4096 visible ASCII characters, without spaces or line breaks",
            fields={"credential": ["invalid"]},
        )
    return credential


def credential_encrypt(credential: str) -> str:
    return _cipher().encrypt(credential.encode()).decode()


def credential_decrypt(token: str) -> str:
    try:
        return _cipher().decrypt(token.encode()).decode()
    except (InvalidToken, ValueError):
        raise CredentialUnreadable() from None


def credential_headers(backend) -> dict[str, str]:
    """The headers that carry `backend`'s credential (empty when it has none). An Anthropic backend always gets
    `anthropic-version`. Raises CredentialUnreadable."""
    headers = {"anthropic-version": ANTHROPIC_VERSION} if backend.kind == ANTHROPIC_KIND else {}
    if backend.credential_encrypted:
        credential = credential_decrypt(backend.credential_encrypted)
        if backend.kind == ANTHROPIC_KIND:
            headers["x-api-key"] = credential
        else:
            headers["Authorization"] = f"Bearer {credential}"
    return headers
