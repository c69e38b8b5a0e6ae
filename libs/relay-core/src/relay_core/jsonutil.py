"""JSON encoding used on the wire and in Redis: compact, deterministic, fast."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson


def dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def loads(raw: str | bytes) -> Any:
    return orjson.loads(raw)


def fingerprint(value: Any) -> str:
    """SHA-256 over canonical JSON (sorted keys): equal requests give equal fingerprints."""
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()
