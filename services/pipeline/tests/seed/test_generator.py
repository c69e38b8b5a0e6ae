"""The seed writes history in exactly the shape the API and consumer write it."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime

import pytest

from relay_pipeline.seed.generator import (
    DAY_US,
    EVENT_COLUMNS,
    RELAYERS,
    TX_COLUMNS,
    US,
    SeedPlan,
    generate_chunk,
)
from relay_pipeline.seed.service import client_ids

END = datetime(2026, 3, 1)
END_US = int((END - datetime(1970, 1, 1)).total_seconds()) * US
TERMINAL = {"confirmed", "failed", "expired", "canceled"}


@pytest.fixture(scope="module")
def generated():
    plan = SeedPlan(
        rows=20_000,
        start_us=END_US - 2 * DAY_US,
        end_us=END_US,
        client_ids=client_ids(5, 7),
        seed=7,
        anomaly_rate=0.0,
    )
    tx_lines, ev_lines = generate_chunk(plan, 0, plan.rows)
    rows = [dict(zip(TX_COLUMNS, line.split("\t"), strict=True)) for line in tx_lines]
    events = defaultdict(list)
    for line in ev_lines:
        event = dict(zip(EVENT_COLUMNS, line.split("\t"), strict=True))
        events[event["transaction_id"]].append(event)
    return rows, events


def test_each_event_starts_where_the_previous_ended_and_the_last_is_the_row_status(generated):
    rows, events = generated
    for row in rows:
        trail = events.get(row["id"], [])
        expected_from = "pending"
        for event in trail:
            assert event["from_status"] == expected_from, row["id"]
            assert event["created_at"] > row["created_at"]  # creation itself is not an event
            expected_from = event["to_status"]
        assert expected_from == row["status"]
        assert int(row["version"]) == 1 + len(trail)
        assert row["updated_at"] == (trail[-1]["created_at"] if trail else row["created_at"])


def test_row_timestamps_agree_with_the_trail(generated):
    rows, events = generated
    for row in rows:
        first = {}
        for event in events.get(row["id"], []):
            first.setdefault(event["to_status"], event["created_at"])
        assert row["submitted_at"] == first.get("submitted", "\\N")
        assert row["confirmed_at"] == first.get("confirmed", "\\N")
        claims = [e for e in events.get(row["id"], []) if e["to_status"] == "processing"]
        assert int(row["attempts"]) == len(claims)


def test_only_direct_requests_carry_a_speed_and_dead_letters_end_failed(generated):
    rows, events = generated
    for row in rows:
        request = json.loads(row["request"])
        assert ("speed" in request) == (row["type"] == "direct")
        dlq = [e for e in events.get(row["id"], []) if e["source"] == "consumer.dlq"]
        if dlq:
            assert row["status"] == "failed"
            assert row["error"] == dlq[0]["reason"]


def test_history_is_mostly_finished_with_realistic_shares(generated):
    rows, _ = generated
    shares = defaultdict(int)
    for row in rows:
        shares[row["status"]] += 1
    assert 0.85 < shares["confirmed"] / len(rows) < 0.95
    assert 0.03 < shares["failed"] / len(rows) < 0.08
    assert sum(shares[s] for s in TERMINAL) / len(rows) > 0.99
    assert all(row["inflight_key"] == "\\N" for row in rows if row["status"] in TERMINAL)


def test_what_reached_a_block_carries_its_receipts_cost(generated):
    rows, events = generated
    nul = "\\N"
    blocks_by_time = []
    prices = defaultdict(list)
    for row in rows:
        trail = events.get(row["id"], [])
        # Mined, or reverted in a block (the tracker saw the receipt fail).
        in_block = next(
            (
                e["created_at"]
                for e in trail
                if e["to_status"] == "mined"
                or (e["to_status"] == "failed" and e["source"] == "tracker")
            ),
            None,
        )
        assert (row["relayer"] != nul) == (row["submit_started_at"] != nul), row["id"]
        if row["fee_wei"] == nul:
            assert row["gas_used"] == row["effective_gas_price"] == row["block_number"] == nul
            # Only one mined in the last seconds of history has no recorded cost yet.
            assert in_block is None or in_block > "2026-02-28 23:59", row["id"]
            continue
        assert in_block is not None, row["id"]
        assert row["relayer"] in RELAYERS
        gas, price = int(row["gas_used"]), int(row["effective_gas_price"])
        assert int(row["fee_wei"]) == gas * price
        assert 21_000 <= gas <= 200_000
        assert row["fee_settled_at"] > in_block
        blocks_by_time.append((in_block, int(row["block_number"])))
        prices[json.loads(row["request"]).get("speed")].append(price)
    assert len(blocks_by_time) > 0.9 * len(rows)
    blocks = [block for _, block in sorted(blocks_by_time)]
    assert blocks == sorted(blocks)  # block numbers grow with time
    assert 24_000_000 < blocks[0] < blocks[-1] < 25_000_000  # mainnet's, in 2026
    median = {speed: sorted(p)[len(p) // 2] for speed, p in prices.items()}
    assert median["safeLow"] < median["average"] < median["fast"] < median["fastest"]
    assert 1.8 < median["fastest"] / median["safeLow"] < 2.2  # fastest pays twice safeLow


def test_same_seed_same_history():
    plan = SeedPlan(
        rows=500,
        start_us=END_US - DAY_US,
        end_us=END_US,
        client_ids=client_ids(3, 1),
    )
    assert generate_chunk(plan, 0, 500) == generate_chunk(plan, 0, 500)
