"""verify_callback against signatures made by an independent implementation (the Standard
Webhooks library): a genuine notification verifies, anything altered or old does not."""

from __future__ import annotations

import base64
import json
import time
import uuid
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook

from relay_client import InvalidCallback, RepeatedCallback, verify_callback
from relay_client.callbacks import SeenIds

SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
BODY = json.dumps(
    {"event": "transaction.status_changed", "transactionId": "t-1", "status": "confirmed"}
).encode()


def _signed(
    body: bytes = BODY, at: float | None = None, secret: str = SECRET, message_id: str = ""
) -> dict[str, str]:
    message_id = message_id or f"msg_{uuid.uuid4().hex}"  # each its own, unless asked
    stamp = datetime.fromtimestamp(time.time() if at is None else at, UTC)
    signature = Webhook(secret).sign(message_id, stamp, body.decode())
    return {
        "Webhook-Id": message_id,
        "Webhook-Timestamp": str(int(stamp.timestamp())),
        "Webhook-Signature": signature,
    }


def test_a_genuine_notification_verifies_whatever_the_header_case() -> None:
    headers = _signed()  # an id of its own: this process remembers the ids it verified
    callback = verify_callback(SECRET, headers, BODY)
    assert callback.id == headers["Webhook-Id"]
    assert (callback.transaction_id, callback.status) == ("t-1", "confirmed")
    assert callback.event == "transaction.status_changed"
    lowered = {k.lower(): v for k, v in _signed().items()}
    assert verify_callback(SECRET, lowered, BODY.decode()).payload["event"] == (
        "transaction.status_changed"
    )
    # a rotation in progress: several signatures, one of them ours
    several = _signed()
    several["Webhook-Signature"] = "v1,AAAA " + several["Webhook-Signature"]
    assert verify_callback(SECRET, several, BODY).status == "confirmed"


def test_altered_forged_old_or_incomplete_notifications_are_refused() -> None:
    other = "whsec_" + base64.b64encode(b"x" * 32).decode()
    cases = [
        (_signed(), BODY.replace(b"confirmed", b"failed"), "no signature matches"),
        (_signed(secret=other), BODY, "no signature matches"),
        (_signed(at=time.time() - 600), BODY, "more than 300 s away"),
        ({"Webhook-Id": "msg_2"}, BODY, "missing"),
        ({**_signed(), "Webhook-Timestamp": "yesterday"}, BODY, "unix seconds"),
    ]
    for headers, body, why in cases:
        with pytest.raises(InvalidCallback, match=why):
            verify_callback(SECRET, headers, body)


def test_a_notification_verified_once_is_a_repeat_within_the_window() -> None:
    seen = SeenIds()
    headers = _signed()
    first = verify_callback(SECRET, headers, BODY, seen=seen)
    with pytest.raises(RepeatedCallback) as repeated:
        verify_callback(SECRET, headers, BODY, seen=seen)  # sent again, or replayed
    assert repeated.value.callback == first
    # Past the window it is refused as old anyway; another id is news.
    assert verify_callback(SECRET, _signed(), BODY, seen=seen).status == "confirmed"
    with pytest.raises(InvalidCallback, match="away from now"):
        verify_callback(SECRET, headers, BODY, seen=seen, now=time.time() + 400)


@pytest.mark.parametrize("secret", ["", "whsec_", "whsec_" + base64.b64encode(b"short").decode()])
def test_an_empty_or_short_secret_verifies_nothing(secret: str) -> None:
    headers = _signed(secret="whsec_" + base64.b64encode(b"\0" * 32).decode())
    with pytest.raises(ValueError, match="empty or too short"):
        verify_callback(secret, headers, BODY)
