"""The relayer-stub driven from outside, through its API and its ``/__admin`` endpoints:
transactions created at the executor directly, its ledger read, and its latency and lifecycle
set before a scenario."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from bench.infra import DEAD
from relay_core.settings import DEV_EXECUTOR_KEY
from relay_testkit import Stub


async def submit_to_stub(stub: Stub, count: int) -> list[str]:
    """Create ``count`` transactions at the executor directly (for the status refresh tier)."""
    url = f"{stub.base_url}/api/v1/relayers/relayer-1/transactions"
    headers = {"Authorization": f"Bearer {DEV_EXECUTOR_KEY}"}
    ids: list[str] = []
    async with httpx.AsyncClient(timeout=10) as http:

        async def one(i: int) -> None:
            body = {"to": DEAD, "data": f"0x{0xF0000000 + i:08x}", "value": "0", "speed": "fast"}
            response = await http.post(url, json=body, headers=headers)
            response.raise_for_status()
            ids.append(response.json()["data"]["id"])

        for start in range(0, count, 16):
            await asyncio.gather(*(one(i) for i in range(start, min(count, start + 16))))
    return ids


async def stub_ledger(stub: Stub, **filters: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=stub.base_url, timeout=30) as http:
        response = await http.get("/__admin/ledger", params={"limit": 100_000, **filters})
        response.raise_for_status()
        return list(response.json()["entries"])


async def stub_ledger_count(stub: Stub, **filters: str) -> int:
    async with httpx.AsyncClient(base_url=stub.base_url, timeout=10) as http:
        response = await http.get("/__admin/ledger", params={"limit": 1, **filters})
        response.raise_for_status()
        return int(response.json()["count"])


async def stub_configure(stub: Stub, latency_ms: int) -> None:
    """Empty ledger, lifecycle paused, ``latency_ms`` on every send."""
    async with httpx.AsyncClient(base_url=stub.base_url, timeout=10) as http:
        (await http.post("/__admin/reset")).raise_for_status()
        (await http.put("/__admin/lifecycle", json={"paused": True})).raise_for_status()
        faults: dict[str, Any] = {}
        if latency_ms:
            faults = {"scope": "submit", "latency": {"dist": "fixed", "ms": latency_ms}}
        (await http.put("/__admin/faults", json=faults)).raise_for_status()
