"""`relay-pipeline reconcile` on a real chain: the relay (API, consumer, relayer-stub signing
and broadcasting on anvil) confirms transactions and records their cost from receipts; the
reconciliation finds every row matching the chain, then names the rows an operator
corrupted."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pymysql
import pytest
from eth_account import Account
from sqlalchemy.engine import make_url

from relay_pipeline.cli import main

pytestmark = pytest.mark.timeout(180)


async def _confirmed_with_cost(http: httpx.AsyncClient, transaction_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        response = await http.get(f"/api/v1/relay/status/{transaction_id}")
        if response.status_code == 429:
            await asyncio.sleep(float(response.headers["Retry-After"]))
            continue
        status = response.json()
        assert status["status"] not in {"failed", "expired", "canceled"}, status
        if status["status"] == "confirmed" and status["feeWei"] is not None:
            return dict(status)
        assert time.monotonic() < deadline, status
        await asyncio.sleep(0.2)


def _execute(database_url: str, sql: str, *params: Any) -> None:
    url = make_url(database_url)
    conn = pymysql.connect(
        host=url.host or "127.0.0.1",
        port=url.port or 3306,
        user=url.username or "root",
        password=url.password or "",
        database=url.database,
        autocommit=True,
    )
    try:
        with conn.cursor() as cursor:
            cursor.execute(sql, params)
    finally:
        conn.close()


async def _reconcile(stack: Any, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    args = ["reconcile", "--rpc-url", stack.chain.rpc_url, "--database-url", stack.database_url]
    code = await asyncio.to_thread(main, [*args, "--since", "-1h", "--quiet"])
    return code, capsys.readouterr().out


async def test_reconcile_finds_the_relays_rows_on_chain_then_names_corrupted_ones(
    stack: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    async with stack.client() as http:
        accepted = []
        for value in (1_000, 2_000, 3_000):
            response = await http.post(
                "/api/v1/relay/direct",
                json={"to": Account.create().address, "value": str(value), "data": "0x"},
            )
            assert response.status_code == 202, response.text
            accepted.append(response.json()["transactionId"])
        statuses = [await _confirmed_with_cost(http, tx_id) for tx_id in accepted]
    assert len({s["blockNumber"] for s in statuses}) >= 1

    code, printed = await _reconcile(stack, capsys)
    assert code == 0, printed
    assert "reconcile: 3 checked, all match the chain" in printed

    overcharged, moved, untouched = accepted
    _execute(
        stack.database_url,
        "UPDATE transactions SET fee_wei = CAST(fee_wei + 1 AS CHAR) WHERE id = %s",
        overcharged,
    )
    _execute(
        stack.database_url,
        "UPDATE transactions SET block_number = block_number + 1 WHERE id = %s",
        moved,
    )
    code, printed = await _reconcile(stack, capsys)
    assert code == 2, printed
    rows = {line.split()[1]: line.split()[0] for line in printed.splitlines()[1:-1]}
    assert rows == {overcharged: "fee", moved: "block"}, printed
    assert untouched not in printed
    assert "reconcile: 3 checked, 2 differ from the chain (block: 1, fee: 1)" in printed
