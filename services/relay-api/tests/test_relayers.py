"""The relayer pool as an operator sees and switches it: ``GET /api/v1/admin/relayers`` shows
each relayer of the pool with what the consumers last reported, ``PATCH`` pauses and resumes
one (in the audit log), a client key may do neither, and ``relay relayers`` does the same from
a terminal."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from typing import Any

import httpx
import pytest

from relay_api.runtime import Runtime
from relay_core import jsonutil, pool
from relay_core.db.models import RelayerReport, utcnow

POOL = ["relayer-1", "relayer-2", "relayer-3"]


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {"executor_relayers": ",".join(POOL), "relayer_jam_after_s": 60.0}


async def _report(runtime: Runtime, relayer: str, state: str = "ok", **values: Any) -> None:
    """What a consumer writes of a relayer every few seconds."""
    now = utcnow()
    async with runtime.sessions() as session, session.begin():
        session.add(
            RelayerReport(
                relayer=relayer,
                state=state,
                detail=values.get("detail"),
                submitted=values.get("submitted", 0),
                oldest_submitted_at=values.get("oldest_submitted_at"),
                balance_wei=values.get("balance_wei"),
                balance_at=now if values.get("balance_wei") else None,
                last_mined_at=values.get("last_mined_at"),
                seen_by="consumer-a",
                seen_at=now,
            )
        )


async def test_every_relayer_of_the_pool_is_shown_unknown_until_a_consumer_reports_it(
    client: httpx.AsyncClient, new_key: Any
) -> None:
    operator = {"X-API-Key": await new_key("watch", role="operator")}
    answer = await client.get("/api/v1/admin/relayers", headers=operator)
    assert answer.status_code == 200, answer.text
    view = answer.json()
    assert [r["relayer"] for r in view["relayers"]] == POOL
    assert view["jamAfterS"] == 60.0
    assert view["minBalanceWei"] == str(10**16)
    for shown in view["relayers"]:
        assert shown["state"] == "unknown"
        assert shown["submitted"] is None
        assert shown["balanceWei"] is None
        assert shown["seenAt"] is None
        assert shown["minBalanceWei"] == str(10**16)
        assert (shown["paused"], shown["pausedBy"], shown["pauseReason"]) == (False, None, None)


async def test_a_consumers_report_is_shown(
    client: httpx.AsyncClient, runtime: Runtime, new_key: Any
) -> None:
    oldest = (utcnow() - timedelta(seconds=75)).replace(microsecond=0)
    await _report(
        runtime,
        "relayer-2",
        "jammed",
        detail="oldest submitted 75 s ago",
        submitted=4,
        oldest_submitted_at=oldest,
        balance_wei="1250000000000000000",
        last_mined_at=oldest - timedelta(seconds=5),
    )
    await _report(runtime, "not-in-the-pool", "ok")  # a relayer since taken out: not shown
    admin = {"X-API-Key": await new_key("ops", admin=True)}
    view = (await client.get("/api/v1/admin/relayers", headers=admin)).json()
    assert [r["relayer"] for r in view["relayers"]] == POOL
    one, two, _ = view["relayers"]
    assert one["state"] == "unknown"
    assert (two["state"], two["detail"], two["submitted"]) == (
        "jammed",
        "oldest submitted 75 s ago",
        4,
    )
    assert two["balanceWei"] == "1250000000000000000"
    assert two["oldestSubmittedAt"] == oldest.isoformat() + "Z"
    assert two["lastMinedAt"] == (oldest - timedelta(seconds=5)).isoformat() + "Z"
    assert two["seenBy"] == "consumer-a"
    assert two["balanceAt"] is not None
    assert two["paused"] is False


async def test_an_operator_pauses_and_resumes_a_relayer_and_the_audit_log_says_so(
    client: httpx.AsyncClient, runtime: Runtime, new_key: Any
) -> None:
    await _report(runtime, "relayer-3", "ok", submitted=2, balance_wei="5")
    operator = {"X-API-Key": await new_key("watch", role="operator")}
    paused = await client.patch(
        "/api/v1/admin/relayers/relayer-3",
        json={"state": "paused", "reason": "nonce stuck"},
        headers=operator,
    )
    assert paused.status_code == 200, paused.text
    shown = paused.json()["relayers"][2]
    assert shown["relayer"] == "relayer-3"
    assert (shown["state"], shown["paused"], shown["pausedBy"], shown["pauseReason"]) == (
        "paused",
        True,
        "watch",
        "nonce stuck",
    )
    assert shown["submitted"] == 2  # what it holds is still shown
    assert [r["state"] for r in paused.json()["relayers"][:2]] == ["unknown", "unknown"]
    async with runtime.sessions() as session:
        assert await pool.paused(session) == {"relayer-3"}

    resumed = await client.patch(
        "/api/v1/admin/relayers/relayer-3", json={"state": "running"}, headers=operator
    )
    assert resumed.status_code == 200, resumed.text
    shown = resumed.json()["relayers"][2]
    assert (shown["state"], shown["paused"], shown["pauseReason"]) == ("ok", False, None)
    async with runtime.sessions() as session:
        assert await pool.paused(session) == set()

    admin = {"X-API-Key": await new_key("ops", admin=True)}
    entries = (await client.get("/api/v1/admin/audit", headers=admin)).json()["entries"]
    resume, pause = entries[:2]
    assert pause["action"] == "relayer.pause"
    assert (pause["actor"]["name"], pause["actor"]["role"]) == ("watch", "operator")
    assert pause["target"] == {"kind": "relayer", "id": None, "name": "relayer-3"}
    assert pause["before"] == {"state": "running"}
    assert pause["after"] == {"state": "paused", "reason": "nonce stuck"}
    assert resume["action"] == "relayer.resume"
    assert resume["before"] == {"state": "paused"}
    assert resume["after"] == {"state": "running", "reason": None}


async def test_a_client_key_may_not_and_a_relayer_outside_the_pool_is_refused(
    client: httpx.AsyncClient, runtime: Runtime, new_key: Any
) -> None:
    plain = {"X-API-Key": await new_key("acme")}
    assert (await client.get("/api/v1/admin/relayers", headers=plain)).status_code == 403
    refused = await client.patch(
        "/api/v1/admin/relayers/relayer-1", json={"state": "paused"}, headers=plain
    )
    assert refused.status_code == 403
    admin = {"X-API-Key": await new_key("ops", admin=True)}
    unknown = await client.patch(
        "/api/v1/admin/relayers/relayer-9", json={"state": "paused"}, headers=admin
    )
    assert unknown.status_code == 400, unknown.text
    assert unknown.json()["error"] == "bad_request"
    assert "relayer-9" in unknown.json()["detail"]
    assert "relayer-1, relayer-2, relayer-3" in unknown.json()["detail"]
    bad = await client.patch(
        "/api/v1/admin/relayers/relayer-1", json={"state": "draining"}, headers=admin
    )
    assert bad.status_code == 422
    assert bad.json()["fields"][0]["field"] == "state"
    async with runtime.sessions() as session:
        assert await pool.paused(session) == set()
    entries = (await client.get("/api/v1/admin/audit", headers=admin)).json()["entries"]
    assert not [e for e in entries if e["action"].startswith("relayer.")]


def _relay(runtime: Runtime, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relay_api.cli", *args],
        env={
            **os.environ,
            "DATABASE_URL": runtime.settings.database_url,
            "RELAY_EXECUTOR_RELAYERS": ",".join(POOL),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_the_command_pauses_a_relayer_and_shows_the_pool(runtime: Runtime) -> None:
    await _report(runtime, "relayer-1", "ok", submitted=3, balance_wei="1250000000000000000")
    paused = _relay(runtime, "relayers", "pause", "relayer-2", "--reason", "maintenance")
    assert paused.returncode == 0, paused.stderr
    assert "relayer relayer-2: paused" in paused.stdout

    shown = _relay(runtime, "relayers")
    assert shown.returncode == 0, shown.stderr
    lines = {line.split()[0]: line for line in shown.stdout.splitlines()[1:] if line.strip()}
    assert lines["relayer-1"].split()[1:3] == ["ok", "3"]
    assert "1.2500 ETH (1250000000000000000 wei)" in lines["relayer-1"]
    assert lines["relayer-2"].split()[1] == "paused"
    assert "paused by relay command, " in lines["relayer-2"]
    assert lines["relayer-2"].endswith(": maintenance")
    assert lines["relayer-3"].split()[1] == "unknown"

    as_json = _relay(runtime, "relayers", "--json")
    assert as_json.returncode == 0, as_json.stderr
    view = jsonutil.loads(as_json.stdout)
    assert [(r["relayer"], r["state"]) for r in view["relayers"]] == [
        ("relayer-1", "ok"),
        ("relayer-2", "paused"),
        ("relayer-3", "unknown"),
    ]

    resumed = _relay(runtime, "relayers", "resume", "relayer-2")
    assert resumed.returncode == 0, resumed.stderr
    assert "relayer relayer-2: running" in resumed.stdout
    async with runtime.sessions() as session:
        assert await pool.paused(session) == set()

    unknown = _relay(runtime, "relayers", "pause", "relayer-9")
    assert unknown.returncode == 2
    assert "relayer-9" in unknown.stderr
    trail = _relay(runtime, "audit", "--limit", "5")
    assert "relayer.resume" in trail.stdout
    assert "relayer.pause" in trail.stdout
