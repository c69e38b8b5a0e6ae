"""`make run` as a user gets it, through a 429 storm on each lane: nothing in the shipped
defaults is shortened. Thirty transactions on the fast lane, thirty on the normal lane, thirty
mixed, each batch sent while the executor answers 429 to everything for 20 s; each batch must
be confirmed on the local chain within 60 s of the storm's end, none failed, none executed
twice (DESIGN invariant 9). Prints each batch's recovery time."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from relay_testkit import makerun

pytestmark = [pytest.mark.faults, pytest.mark.timeout(900)]

DEAD = "0x000000000000000000000000000000000000dEaD"
STORM_S = 20.0
WITHIN_S = 60.0
BATCH = 30
SHAPES = {
    "fast lane": ["fast"] * BATCH,
    "normal lane": ["average"] * BATCH,
    "mixed": ["fast", "average", "fastest", "safeLow"] * (BATCH // 4) + ["fast", "average"],
}


@dataclass
class Storm:
    shape: str
    accepted: int
    confirmed: int
    failed: int
    executed_twice: int
    submitted_s: float  # from the storm's end to the last handed to the executor
    recovery_s: float  # from the storm's end to the last `confirmed` the API answered

    def line(self) -> str:
        return (
            f"make run, {self.shape}, {STORM_S:.0f} s of 429: {self.accepted} accepted, "
            f"{self.confirmed} confirmed, failed={self.failed} "
            f"executed_twice={self.executed_twice}; after the storm, the last submitted in "
            f"{self.submitted_s:.1f} s, the last confirmed in {self.recovery_s:.1f} s"
        )


def _storm(run: makerun.MakeRun, index: int, shape: str, speeds: list[str]) -> Storm:
    executor = run.banner("executor")
    api = httpx.Client(base_url=run.base, headers={"X-API-Key": run.key}, timeout=10)
    stub = httpx.Client(base_url=executor, headers=run.stub_admin, timeout=10)
    with api, stub:
        stub.patch(
            "/__admin/faults", json={"rate_limit_rate": 1.0, "rate_limit_after_s": 2}
        ).raise_for_status()
        began = time.monotonic()
        data = [f"0x{index:02x}{n:06x}" for n in range(len(speeds))]
        ids: dict[str, str] = {}
        for payload, speed in zip(data, speeds, strict=True):
            answer = api.post(
                "/api/v1/relay/direct",
                json={"to": DEAD, "value": "1", "data": payload, "speed": speed},
                headers={"Idempotency-Key": f"storm-{index}-{payload}"},
            )
            assert answer.status_code == 202, answer.text
            ids[answer.json()["transactionId"]] = payload
        time.sleep(max(0.0, began + STORM_S - time.monotonic()))
        stub.patch("/__admin/faults", json={"rate_limit_rate": 0.0}).raise_for_status()
        ended = time.monotonic()
        ended_at = datetime.now(UTC)

        statuses: dict[str, str] = {}
        submitted: dict[str, datetime] = {}
        last_change = ended
        while time.monotonic() < ended + WITHIN_S + 60:
            listed = api.get("/api/v1/relay/transactions", params={"limit": 100})
            if listed.status_code == 429:
                time.sleep(1)
                continue
            listed.raise_for_status()
            items = [item for item in listed.json()["items"] if item["transactionId"] in ids]
            now = {item["transactionId"]: item["status"] for item in items}
            for item in items:
                if item["submittedAt"]:
                    submitted[item["transactionId"]] = _utc(item["submittedAt"])
            for tx_id in ids:
                if now.get(tx_id) != statuses.get(tx_id) and now.get(tx_id) == "confirmed":
                    last_change = time.monotonic()
                statuses[tx_id] = now.get(tx_id, "?")
            if all(statuses[tx_id] in ("confirmed", "failed", "expired") for tx_id in ids):
                break
            time.sleep(0.5)
        ledger = stub.get("/__admin/ledger", params={"limit": 100_000}).json()["entries"]
    runs = Counter(str(entry["data"]).lower() for entry in ledger)
    return Storm(
        shape=shape,
        accepted=len(ids),
        confirmed=sum(1 for s in statuses.values() if s == "confirmed"),
        failed=sum(1 for s in statuses.values() if s in ("failed", "expired")),
        executed_twice=sum(1 for payload in ids.values() if runs[payload] > 1),
        submitted_s=(max(submitted.values(), default=ended_at) - ended_at).total_seconds(),
        recovery_s=last_change - ended,
    )


def _utc(text: str) -> datetime:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def test_make_run_recovers_from_a_429_storm_on_every_lane_within_a_minute(
    tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    run = makerun.start(workdir, tmp_path / "state", tmp_path / "run.log")
    storms: list[Storm] = []
    try:
        for index, (shape, speeds) in enumerate(SHAPES.items()):
            storm = _storm(run, index, shape, speeds)
            print(storm.line())  # noqa: T201
            storms.append(storm)
            clean = storm.confirmed == BATCH and not storm.failed and not storm.executed_twice
            record_property(
                "fault", {"line": storm.line(), "clean": clean and storm.recovery_s <= WITHIN_S}
            )
    finally:
        makerun.interrupt(run)
    for storm in storms:
        assert storm.confirmed == storm.accepted == BATCH, storm.line()
        assert storm.failed == storm.executed_twice == 0, storm.line()
        assert storm.recovery_s <= WITHIN_S, storm.line()
