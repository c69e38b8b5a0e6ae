"""Verify Relay's status notifications on the receiving side.

Relay signs every callback as a Standard Webhook (https://www.standardwebhooks.com):
``webhook-id``, ``webhook-timestamp`` (unix seconds) and ``webhook-signature`` (one or more
space-separated ``v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<raw body>">``), keyed with the
client's ``whsec_`` secret. Verify the raw body as received, before parsing it.

A callback older than the tolerance (five minutes) is refused; one within it whose
``webhook-id`` this process verified already raises :class:`RepeatedCallback` (answer it 2xx
and act on it once): Relay sends a notification again when it did not get an answer, and a
captured one could be replayed. The ids are remembered in memory, per process, for the
tolerance: a receiver with several processes deduplicates by ``webhook-id`` in its own store.
A secret that is empty or shorter than 16 bytes is refused (an unset setting must not verify
everything signed with no key).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime

from relay_client.errors import InvalidCallback, RepeatedCallback
from relay_client.models import Callback

SECRET_PREFIX = "whsec_"  # noqa: S105 - a prefix, not a secret
DEFAULT_TOLERANCE_S = 300
_SHORTEST_SECRET = 16  # bytes (Relay's are 32)


class SeenIds:
    """``webhook-id``s verified within the replay window (bounded: the oldest are forgotten
    first, and none is kept past its window)."""

    def __init__(self, most: int = 100_000) -> None:
        self._expires: dict[str, float] = {}
        self._most = most
        self._lock = threading.Lock()

    def first_time(self, message_id: str, now: float, keep_s: float) -> bool:
        with self._lock:
            expiry = self._expires.get(message_id)
            if expiry is not None and expiry > now:
                return False
            if len(self._expires) >= self._most:
                for old in [k for k, v in self._expires.items() if v <= now] or list(self._expires)[
                    : self._most // 10
                ]:
                    self._expires.pop(old, None)
            self._expires[message_id] = now + keep_s
            return True


_SEEN = SeenIds()


def verify_callback(
    secret: str,
    headers: Mapping[str, str],
    body: bytes | str,
    *,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    now: float | None = None,
    seen: SeenIds | None = None,
) -> Callback:
    """The notification, once its signature matches and its timestamp is within
    ``tolerance_s`` of ``now`` (a replay of an old one is refused), the first time its
    ``webhook-id`` is verified (:class:`~relay_client.errors.RepeatedCallback` after that,
    within the window; ``seen``: where ids are remembered, this process's by default). Raises
    :class:`~relay_client.errors.InvalidCallback` otherwise.

    ``headers`` may be any mapping (a framework's case-insensitive one, or a plain dict in any
    case); ``body`` the raw bytes received."""
    key = secret_bytes(secret)
    if len(key) < _SHORTEST_SECRET:
        raise ValueError("the callback secret is empty or too short: is it set?")
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
    expected = hmac.new(key, signed, hashlib.sha256).digest()
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
    callback = Callback(message_id, datetime.fromtimestamp(timestamp, UTC), payload)
    # Remembered for as long as its timestamp may still pass, whichever side of now it is.
    keep_s = max(0.0, timestamp + tolerance_s - current) + 1
    if not (seen or _SEEN).first_time(message_id, current, keep_s):
        raise RepeatedCallback(callback)
    return callback


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
