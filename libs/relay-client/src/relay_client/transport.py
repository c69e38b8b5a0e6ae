"""What both clients send with every request and how an answer (or none) becomes a
:class:`~relay_client.flows.Reply`."""

from __future__ import annotations

import os
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import httpx

from relay_client.flows import Reply

DEFAULT_URL = "http://127.0.0.1:8000"

try:
    _VERSION = version("relay-client")
except PackageNotFoundError:  # pragma: no cover - run from a source tree
    _VERSION = "0"


def settings(base_url: str | None, api_key: str | None) -> tuple[str, str]:
    url = base_url or os.environ.get("RELAY_API_URL") or DEFAULT_URL
    key = api_key or os.environ.get("RELAY_API_KEY")
    if not key:
        raise ValueError("no API key: pass api_key= or set RELAY_API_KEY")
    return url.rstrip("/"), key


def headers(api_key: str, extra: dict[str, str] | None) -> dict[str, str]:
    return {"X-API-Key": api_key, "User-Agent": f"relay-client/{_VERSION}", **(extra or {})}


def reply(response: httpx.Response) -> Reply:
    body: Any
    if response.headers.get("content-type", "").startswith("application/json"):
        try:
            body = response.json()
        except ValueError:
            body = response.text
    else:
        body = response.text
    return Reply(response.status_code, response.headers, body)


def failed(exc: httpx.TransportError) -> Reply:
    return Reply(0, {}, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
