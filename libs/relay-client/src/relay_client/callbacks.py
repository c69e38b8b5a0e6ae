"""Verify Relay's status notifications on the receiving side.

Relay signs every callback as a Standard Webhook (https://www.standardwebhooks.com):
``webhook-id``, ``webhook-timestamp`` (unix seconds) and ``webhook-signature`` (one or more
space-separated ``v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<raw body>">``), keyed with the
client's ``whsec_`` secret. Verify the raw body as received, before parsing it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from datetime import UTC, datetime

from relay_client.errors import InvalidCallback
from relay_client.models import Callback

SECRET_PREFIX = "whsec_"  # noqa: S105 - a prefix, not a secret
DEFAULT_TOLERANCE_S = 300


def verify_callback(
    secret: str,
    headers: Mapping[str, str],
    body: bytes | str,
    *,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    now: float | None = None,
) -> Callback:
    """The notification, once its signature matches and its timestamp is within
    ``tolerance_s`` of ``now`` (a replay of an old one is refused). Raises
    :class:`~relay_client.errors.InvalidCallback` otherwise.

    ``headers`` may be any mapping (a framework's case-insensitive one, or a plain dict in any
    case); ``body`` the raw bytes received."""
    lowered = {name.lower(): value for name, value in headers.items()}
    message_id = lowered.get("webhook-id")
    stamp = lowered.get("webhook-timestamp")
    signatures = lowered.get("webhook-signature")
    if not message_id or not stamp or not signatures:
        raise InvalidCallback("missing webhook-id, webhook-timestamp or webhook-signature")
    try:
        timestamp = int(stamp)
    except ValueError:
        raise InvalidCallback("webhook-timestamp is not unix seconds") from None
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance_s:
        raise InvalidCallback(f"webhook-timestamp is more than {tolerance_s:g} s away from now")
    raw = body.encode() if isinstance(body, str) else body
    signed = f"{message_id}.{timestamp}.".encode() + raw
    expected = hmac.new(secret_bytes(secret), signed, hashlib.sha256).digest()
    for candidate in signatures.split():
        version, _, encoded = candidate.partition(",")
        if version != "v1":
            continue
        try:
            given = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            continue
        if hmac.compare_digest(given, expected):
            break
    else:
        raise InvalidCallback("no signature matches this secret")
    try:
        payload = json.loads(raw)
    except ValueError:
        raise InvalidCallback("the body is not JSON") from None
    if not isinstance(payload, dict):
        raise InvalidCallback("the body is not a JSON object")
    return Callback(message_id, datetime.fromtimestamp(timestamp, UTC), payload)


def secret_bytes(secret: str) -> bytes:
    """The HMAC key of a ``whsec_`` secret (base64; base64url is read too)."""
    body = secret.removeprefix(SECRET_PREFIX)
    padded = body + "=" * (-len(body) % 4)
    try:
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        try:
            return base64.urlsafe_b64decode(padded)
        except (binascii.Error, ValueError):
            raise InvalidCallback("the secret is not a whsec_ secret") from None
