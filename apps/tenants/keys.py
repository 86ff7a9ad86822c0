"""API key material: generation, hashing, the visible prefix. Keys are 256-bit random secrets, so a
plain SHA-256 is the right hash (a slow password hash adds latency without adding safety)."""

import hashlib
import secrets

KEY_PREFIX = "ak-"
PREFIX_LENGTH = 12  # "ak-" and 9 characters of the secret, shown in lists and audit entries


def key_generate() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_hash(raw_key: str) -> str:
    return hashlib.sha256(raw_key.encode()).hexdigest()


def key_prefix(raw_key: str) -> str:
    return raw_key[:PREFIX_LENGTH]
