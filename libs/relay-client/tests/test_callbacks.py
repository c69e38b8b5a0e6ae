"""verify_callback against signatures made by an independent implementation (the Standard
Webhooks library): a genuine notification verifies, anything altered or old does not."""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook

from relay_client import InvalidCallback, verify_callback

SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
BODY = json.dumps(
    {"event": "transaction.status_changed", "transactionId": "t-1", "status": "confirmed"}
).encode()


def _signed(body: bytes = BODY, at: float | None = None, secret: str = SECRET) -> dict[str, str]:
    stamp = datetime.fromtimestamp(time.time() if at is None else at, UTC)
    signature = Webhook(secret).sign("msg_1", stamp, body.decode())
    return {
        "Webhook-Id": "msg_1",
        "Webhook-Timestamp": str(int(stamp.timestamp())),
        "Webhook-Signature": signature,
    }


def test_a_genuine_notification_verifies_whatever_the_header_case() -> None:
    callback = verify_callback(SECRET, _signed(), BODY)
    assert (callback.id, callback.transaction_id, callback.status) == ("msg_1", "t-1", "confirmed")
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
        ({"Webhook-Id": "msg_1"}, BODY, "missing"),
        ({**_signed(), "Webhook-Timestamp": "yesterday"}, BODY, "unix seconds"),
    ]
    for headers, body, why in cases:
        with pytest.raises(InvalidCallback, match=why):
            verify_callback(SECRET, headers, body)
