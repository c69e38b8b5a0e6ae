"""A real ``relayer-stub`` process on a free 127.0.0.1 port: real HTTP, real timeouts,
SIGTERM and SIGKILL."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import pytest
from stub_testkit import DEAD, start_stub_process, stop_stub_process, tx_body

TX_PATH = "/api/v1/relayers/relayer-1/transactions"


def _wait_for(client: httpx.Client, tx_id: str, status: str, auth: dict[str, str]) -> dict:
    deadline = time.monotonic() + 10
    while True:
        tx = client.get(f"{TX_PATH}/{tx_id}", headers=auth).json()["data"]
        if tx["status"] == status:
            return dict(tx)
        assert time.monotonic() < deadline, f"{tx_id} stuck in {tx['status']}"
        time.sleep(0.02)


def test_the_process_serves_the_api_on_loopback_and_stops_cleanly_on_sigterm(
    tmp_path: Path,
) -> None:
    stub = start_stub_process(tmp_path, tmp_path / "ledger.sqlite3")
    try:
        with httpx.Client(base_url=stub.base_url, timeout=5) as client:
            assert client.get("/api/v1/health").text == "OK"
            assert client.post(TX_PATH, json=tx_body()).status_code == 401
            response = client.post(TX_PATH, json=tx_body(), headers=stub.auth)
            assert response.status_code == 200
            tx = _wait_for(client, response.json()["data"]["id"], "confirmed", stub.auth)
            assert tx["to"] == DEAD
    finally:
        code = stop_stub_process(stub, signal.SIGTERM)

    assert code == 0
    assert "http://127.0.0.1:" in stub.log()  # bound to loopback by default
    assert "stub.stopped" in stub.log()
    assert "Traceback" not in stub.log()


def test_accept_then_hang_records_the_send_and_answers_only_after_the_client_gave_up(
    tmp_path: Path,
) -> None:
    stub = start_stub_process(
        tmp_path,
        tmp_path / "ledger.sqlite3",
        STUB_FAULTS='{"hang_next": 1, "hang_s": 2}',
    )
    try:
        with httpx.Client(base_url=stub.base_url, timeout=0.5) as client:
            started = time.monotonic()
            with pytest.raises(httpx.ReadTimeout):
                client.post(TX_PATH, json=tx_body(), headers=stub.auth)
            assert time.monotonic() - started < 2

            ledger = client.get("/__admin/ledger").json()
            assert ledger["count"] == 1
            assert ledger["entries"][0]["hung"] is True
            _wait_for(client, ledger["entries"][0]["id"], "confirmed", stub.auth)
            listed = client.get(TX_PATH, headers=stub.auth).json()["data"]
            assert [tx["id"] for tx in listed] == [ledger["entries"][0]["id"]]

            quick = client.post(TX_PATH, json=tx_body(), headers=stub.auth)
            assert quick.status_code == 200
        with httpx.Client(base_url=stub.base_url, timeout=10) as patient:
            started = time.monotonic()
            patient.put("/__admin/faults", json={"hang_next": 1, "hang_s": 1})
            held = patient.post(TX_PATH, json=tx_body(), headers=stub.auth)
            assert held.status_code == 200
            assert held.json()["data"]["status"] == "pending"
            assert time.monotonic() - started >= 1
    finally:
        stop_stub_process(stub)


def test_every_answered_send_survives_a_sigkill(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    stub = start_stub_process(tmp_path, ledger, STUB_LIFECYCLE='{"paused": true}')
    with httpx.Client(base_url=stub.base_url, timeout=5) as client:
        ids = [
            client.post(TX_PATH, json=tx_body(), headers=stub.auth).json()["data"]["id"]
            for _ in range(20)
        ]
    stop_stub_process(stub, signal.SIGKILL)

    restarted = start_stub_process(tmp_path, ledger)
    try:
        with httpx.Client(base_url=restarted.base_url, timeout=5) as client:
            ledger_ids = [e["id"] for e in client.get("/__admin/ledger").json()["entries"]]
            assert ledger_ids == ids
            _wait_for(client, ids[-1], "confirmed", restarted.auth)
    finally:
        stop_stub_process(restarted)
