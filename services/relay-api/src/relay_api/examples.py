"""One example of every body the API takes or sends, by its schema's name, and of the error
body of every status: the OpenAPI document shows them beside each request and response
(``relay_api.openapi.document``), and a test validates each against its schema."""

from __future__ import annotations

from typing import Any

from relay_core import ethereum

TX = "0b6f1c2e-8a4d-4c3e-9f5b-2d7e1a9c4b10"
OTHER_TX = "5d2a7f90-1c3b-4e8a-a6d4-93b0c2e1f875"
DEAD = "0x000000000000000000000000000000000000dEaD"
SIGNER = "0x71C7656EC7ab88b098defB751B7401B5f6d8976F"
FORWARDER = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
HASH = "0x" + "9c" * 32
AT = "2026-11-25T10:00:00.000Z"
LATER = "2026-11-25T10:00:04.250Z"

_STATUS = {
    "transactionId": TX,
    "type": "direct",
    "status": "confirmed",
    "hash": HASH,
    "errorMessage": None,
    "createdAt": AT,
    "updatedAt": LATER,
    "submittedAt": "2026-11-25T10:00:00.410Z",
    "confirmedAt": LATER,
    "blockNumber": 1234567,
    "gasUsed": 21000,
    "effectiveGasPrice": "1500000000",
    "feeWei": "31500000000000",
}
_ROW = {
    "id": TX,
    "clientId": "3f0c4b1a-77e2-4d8e-b1d0-6a2c9e5f0b33",
    "type": "direct",
    "status": "processing",
    "error": None,
    "attempts": 1,
    "executorTxId": None,
    "createdAt": AT,
    "updatedAt": LATER,
}
_DEAD_LETTER = {
    "messageId": "c8a1e2f4-5b6d-4e7f-8a9b-0c1d2e3f4a5b",
    "transactionId": TX,
    "kind": None,
    "reason": "moved by SQS after 40 receives (a consumer died on it each time)",
    "receiveCount": 40,
    "deadLetteredAt": LATER,
    "transaction": _ROW,
    "body": None,
    "events": None,
}

BODIES: dict[str, Any] = {
    "DirectRequest": {"to": DEAD, "data": "0x", "value": "1000000000000000", "speed": "fast"},
    "GaslessRequest": {
        "request": {
            "from": SIGNER,
            "to": DEAD,
            "value": "0",
            "gas": "200000",
            "nonce": "0",
            "deadline": 1795600000,
            "data": "0x",
        },
        "signature": "0x" + "ab" * 64 + "1b",
    },
    "AcceptedResponse": {"transactionId": TX, "status": "pending", "createdAt": AT},
    "SpeedUpRequest": {"speed": "fastest"},
    "SpeedUpResponse": {
        "transactionId": TX,
        "status": "submitted",
        "speed": "fastest",
        "speedUp": "sent",
        "hash": HASH,
        "detail": "the executor sends it again at fastest, at the same nonce: whichever of the "
        "two is mined is the transaction (its hash in the status follows)",
    },
    "BatchRequest": {
        "transactions": [
            {"to": DEAD, "value": "1000000000000000"},
            {"to": DEAD, "value": "2000000000000000", "speed": "average"},
        ]
    },
    "BatchResponse": {
        "results": [
            {"transactionId": TX, "status": "pending", "createdAt": AT},
            {"transactionId": OTHER_TX, "status": "pending", "createdAt": AT},
        ]
    },
    "DomainResponse": {
        "domain": {
            "name": "ERC2771Forwarder",
            "version": "1",
            "chainId": 31337,
            "verifyingContract": FORWARDER,
        },
        "types": ethereum.FORWARD_REQUEST_TYPES,
        "primaryType": "ForwardRequest",
    },
    "NonceResponse": {"address": SIGNER, "nonce": "3"},
    "StatusResponse": _STATUS,
    "CancelResponse": {
        "transactionId": TX,
        "status": "submitted",
        "cancel": "sent",
        "detail": "the executor replaces it with a no-op at its nonce: canceled once that is "
        "mined, or confirmed if the original is mined first",
    },
    "CancelRefused": {
        "error": "conflict",
        "detail": "the transaction is confirmed: too late",
        "status": "confirmed",
    },
    "TransactionPage": {
        "items": [_STATUS],
        "nextCursor": "MjAyNi0xMS0yNVQxMDowMDowMC4wMDBafDBiNmYxYzJl",
    },
    "CallbackRequest": {"url": "https://hooks.example.com/relay", "rotateSecret": False},
    "CallbackResponse": {"url": "https://hooks.example.com/relay", "secret": None},
    "WebhookAck": {"status": "ok"},
    "Liveness": {"status": "ok"},
    "Readiness": {
        "status": "ready",
        "components": {"database": "ok", "sqs": "ok", "redis": "ok"},
    },
    "ClientChanges": {"maxValueWei": "1000000000000000000", "rateLimitPerS": 50.0},
    "ClientView": {
        "id": "3f0c4b1a-77e2-4d8e-b1d0-6a2c9e5f0b33",
        "name": "acme",
        "role": "client",
        "keyPrefix": "rk_Yx3kQ",
        "revoked": False,
        "callbackUrl": "https://hooks.example.com/relay",
        "rateLimit": {"perSecond": 50.0, "burst": 100, "own": True},
        "policy": {
            "granted": True,
            "unlimited": False,
            "grantedAt": AT,
            "grantedBy": "ops (admin)",
            "allowedTo": [],
            "maxValueWei": "1000000000000000000",
            "dailyValueWei": None,
            "maxGas": 300000,
            "gaslessValue": False,
            "maxFeeWei": "30000000000000000",
            "dailyFeeWei": "1000000000000000000",
            "speeds": ["average", "fast"],
        },
        "spentLast24hWei": "2000000000000000",
        "feesLast24hWei": "90000000000000000",
    },
    "AuditPage": {
        "entries": [
            {
                "id": 42,
                "at": AT,
                "actor": {
                    "id": "9b2d7c41-0e3a-4f5b-8c6d-1a2b3c4d5e6f",
                    "name": "ops",
                    "role": "admin",
                },
                "action": "client.change",
                "target": {
                    "kind": "client",
                    "id": "3f0c4b1a-77e2-4d8e-b1d0-6a2c9e5f0b33",
                    "name": "acme",
                },
                "before": {"dailyFeeWei": None},
                "after": {"dailyFeeWei": "1000000000000000000"},
            }
        ],
        "nextCursor": "42",
    },
    "LaneChange": {"state": "paused", "reason": "relayer upgrade"},
    "QueuesView": {
        "lanes": [
            {
                "lane": "normal",
                "state": "paused",
                "reason": "relayer upgrade",
                "changedBy": "ops",
                "changedAt": AT,
            }
        ],
        "consumers": [
            {
                "consumer": "ip-10-0-1-17:7",
                "lane": "normal",
                "state": "paused",
                "inFlight": 0,
                "received": 1250,
                "circuit": "closed",
                "startedAt": "2026-11-25T08:00:00.000Z",
                "seenSecondsAgo": 1.4,
            }
        ],
        "depths": {
            "queue": {"visible": 312, "inFlight": 0, "delayed": 0},
            "dlq": {"visible": 0, "inFlight": 0, "delayed": 0},
            "fast": {"visible": 0, "inFlight": 0, "delayed": 0},
            "fast-dlq": {"visible": 0, "inFlight": 0, "delayed": 0},
        },
    },
    "RelayerChange": {"state": "paused", "reason": "nonce stuck at the executor"},
    "RelayersView": {
        "relayers": [
            {
                "relayer": "relayer-1",
                "state": "ok",
                "detail": None,
                "submitted": 3,
                "oldestSubmittedAt": "2026-11-25T09:59:58Z",
                "balanceWei": "1250000000000000000",
                "balanceAt": "2026-11-25T09:59:40Z",
                "minBalanceWei": "10000000000000000",
                "lastMinedAt": "2026-11-25T09:59:59Z",
                "seenAt": "2026-11-25T10:00:00Z",
                "seenBy": "ip-10-0-1-17:7",
                "paused": False,
                "pausedBy": None,
                "pauseReason": None,
            },
            {
                "relayer": "relayer-2",
                "state": "paused",
                "detail": "jammed: oldest submitted 95 s ago",
                "submitted": 1,
                "oldestSubmittedAt": "2026-11-25T09:58:25Z",
                "balanceWei": "40000000000000000",
                "balanceAt": "2026-11-25T09:59:40Z",
                "minBalanceWei": "10000000000000000",
                "lastMinedAt": "2026-11-25T09:58:20Z",
                "seenAt": "2026-11-25T10:00:00Z",
                "seenBy": "ip-10-0-1-17:7",
                "paused": True,
                "pausedBy": "ops",
                "pauseReason": "nonce stuck at the executor",
            },
        ],
        "jamAfterS": 45.0,
        "minBalanceWei": "10000000000000000",
    },
    "DeadLetters": {"queue": "relay-transactions-dlq", "depth": 1, "messages": [_DEAD_LETTER]},
    "DeadLetterView": _DEAD_LETTER,
    "RedriveRequest": {"messages": [TX]},
    "RedriveResult": {
        "redriven": [{"messageId": _DEAD_LETTER["messageId"], "transactionId": TX, "why": None}],
        "left": [
            {
                "messageId": "0e4f7a2b-9c1d-4b3e-8f6a-5d2c1b0a9e8f",
                "transactionId": OTHER_TX,
                "why": "its row is final (failed): statuses only move forward",
            }
        ],
        "how": "per message",
    },
    "Purged": {"purged": 12},
    "Activity": {
        "oldestPendingAgeS": {"normal": 2.5},
        "minutes": [{"minute": "2026-11-25T10:00Z", "accepted": 120, "finished": 118}],
        "clientsWithoutLimits": [
            {
                "id": "5e1d9a77-2c3b-4f10-9a8e-0b1c2d3e4f50",
                "name": "legacy-batch",
                "grantedAt": AT,
                "grantedBy": "the upgrade to deny-by-default (migration 0009)",
            }
        ],
        "transactions": [
            {
                "transactionId": TX,
                "client": "acme",
                "type": "direct",
                "status": "confirmed",
                "attempts": 1,
                "error": None,
                "createdAt": AT,
                "updatedAt": LATER,
            }
        ],
    },
}

# The executor's webhook (the OpenZeppelin Relayer's notification), as it arrives.
EXECUTOR_WEBHOOK = {
    "id": "8d7c6b5a-4f3e-4d2c-9b1a-0f9e8d7c6b5a",
    "event": "transaction_update",
    "payload": {
        "payload_type": "transaction",
        "id": "2c4e6a8b-0d1f-4a3c-8e5b-7f9a1c3e5d7b",
        "status": "confirmed",
        "hash": HASH,
    },
    "timestamp": LATER,
}

ERRORS: dict[int, dict[str, Any]] = {
    400: {"error": "bad_request", "detail": "gasLimit: must be at most 30000000"},
    401: {"error": "unauthorized", "detail": "invalid API key"},
    403: {
        "error": "policy_refused",
        "detail": "policy maxValueWei: value 2000000000000000000 is above 1000000000000000000",
    },
    404: {"error": "not_found", "detail": "transaction not found"},
    409: {
        "error": "conflict",
        "detail": "Idempotency-Key was already used with a different request; use a new key",
    },
    413: {"error": "payload_too_large", "detail": "body larger than 65536 bytes"},
    415: {"error": "unsupported_media_type", "detail": "send Content-Type: application/json"},
    422: {
        "error": "validation_error",
        "detail": "to: must be 0x followed by 40 hex digits",
        "fields": [{"field": "to", "message": "must be 0x followed by 40 hex digits"}],
    },
    429: {"error": "rate_limited", "detail": "over 20 requests/s: retry after 1 s"},
    503: {"error": "service_unavailable", "detail": "the database is unavailable; retry later"},
}
