"""API keys: generated with 256 bits of entropy, shown once, stored only as a SHA-256 digest.

A fast hash is the right tool here: the keys are random, not passwords, so there is nothing
for a slow KDF to protect, and the digest lets the API find the client with one indexed read.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

KEY_PREFIX = "rk_"


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def display_prefix(key: str) -> str:
    """The first characters, enough for an operator to tell keys apart in a listing."""
    return key[:10]


def digest_matches(presented: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_key(presented), stored_hash)


CALLBACK_SECRET_PREFIX = "whsec_"  # noqa: S105 (a prefix, not a secret)


def generate_callback_secret() -> str:
    """A client's callback signing secret in the Standard Webhooks form: ``whsec_`` and 32
    random bytes in base64, which their libraries (standardwebhooks) take as it is."""
    return CALLBACK_SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def callback_secret_bytes(secret: str) -> bytes:
    """The HMAC key of a callback secret (older ones were base64url: both are read)."""
    body = secret.removeprefix(CALLBACK_SECRET_PREFIX)
    padded = body + "=" * (-len(body) % 4)
    try:
        return base64.b64decode(padded, validate=True)
    except ValueError:
        return base64.urlsafe_b64decode(padded)
