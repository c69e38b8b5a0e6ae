"""The in-doubt lookup: complete or no answer, one scan for many, and a choice of match that
leaves no executor transaction without a row in any order of decisions."""

from __future__ import annotations

import asyncio
import heapq
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest

from queue_consumer.circuit import CircuitBreaker, ExecutorGuard
from queue_consumer.transactions.lookup import ExecutorLookup, choose
from relay_core.executor import ErrorKind, ExecutorError, ExecutorPage, ExecutorTx

DEAD = "0x000000000000000000000000000000000000dead"
T0 = datetime(2026, 11, 23, 12, 0, 0)


def record(n: int, at: datetime, data: str = "0x01", to: str = DEAD, **fields: Any) -> ExecutorTx:
    return ExecutorTx(
        id=f"exec-{n}",
        status="pending",
        hash=None,
        to=to,
        data=data,
        value=0,
        created_at=at,
        status_reason=None,
        raw={},
        **fields,
    )


class FakeExecutor:
    """The executor's list, newest first, with calls counted and faults on demand."""

    def __init__(self, records: list[ExecutorTx]) -> None:
        self.records = sorted(records, key=lambda r: r.created_at or T0, reverse=True)
        self.pages: list[int] = []
        self.fail_on_page: int | None = None
        self.before_page: Any = None

    async def list_page(self, page: int, per_page: int = 100) -> ExecutorPage:
        await asyncio.sleep(0)
        if self.before_page is not None:
            self.before_page(page)
        self.pages.append(page)
        if page == self.fail_on_page:
            raise ExecutorError(ErrorKind.server_error, "boom", status=500)
        start = (page - 1) * per_page
        return ExecutorPage(self.records[start : start + per_page], len(self.records))


def lookup_over(executor: FakeExecutor, **kwargs: Any) -> ExecutorLookup:
    guard = ExecutorGuard(CircuitBreaker(), max_in_flight=10)
    return ExecutorLookup(executor, guard, **kwargs)  # type: ignore[arg-type]


def payload(data: str = "0x01") -> dict[str, Any]:
    return {"to": DEAD, "data": data, "value": "0"}


async def test_a_match_behind_eight_thousand_newer_records_is_found() -> None:
    ours = record(0, T0, data="0xaa")
    newer = [record(i, T0 + timedelta(seconds=10 + i * 0.01)) for i in range(1, 8001)]
    older = [record(9000 + i, T0 - timedelta(minutes=5 + i)) for i in range(300)]
    executor = FakeExecutor([ours, *newer, *older])
    found = await lookup_over(executor, page_size=100, max_pages=500).find(payload("0xaa"), T0)
    assert found.complete
    assert [m.id for m in found.matches] == ["exec-0"]
    # It read just past the stamp: the 81st page holds ours, the 82nd is older than the horizon.
    assert max(executor.pages) <= 82


async def test_running_out_of_pages_is_incomplete_never_not_found() -> None:
    newer = [record(i, T0 + timedelta(seconds=10 + i * 0.01)) for i in range(1, 2001)]
    executor = FakeExecutor(newer)
    found = await lookup_over(executor, page_size=100, max_pages=5).find(payload("0xaa"), T0)
    assert not found.complete
    assert found.matches == ()
    assert "5 pages" in found.reason


async def test_an_error_while_listing_is_incomplete() -> None:
    newer = [record(i, T0 + timedelta(seconds=10 + i)) for i in range(1, 400)]
    executor = FakeExecutor(newer)
    executor.fail_on_page = 2
    found = await lookup_over(executor, page_size=100).find(payload("0xaa"), T0)
    assert not found.complete
    assert "page 2" in found.reason


async def test_the_end_of_the_list_is_a_complete_answer() -> None:
    executor = FakeExecutor([record(i, T0 + timedelta(seconds=i)) for i in range(1, 30)])
    found = await lookup_over(executor, page_size=100).find(payload("0xaa"), T0)
    assert found.complete
    assert found.matches == ()


async def test_an_open_circuit_makes_the_lookup_incomplete() -> None:
    executor = FakeExecutor([record(1, T0)])
    breaker = CircuitBreaker(failure_threshold=1, cooldown_s=60)
    breaker.record(ExecutorError(ErrorKind.connection, "down"), probe=False)
    lookup = ExecutorLookup(executor, ExecutorGuard(breaker, 10))  # type: ignore[arg-type]
    found = await lookup.find(payload(), T0)
    assert not found.complete
    assert executor.pages == []


async def test_records_arriving_while_it_reads_push_pages_back_but_hide_nothing() -> None:
    ours = record(0, T0, data="0xaa")
    records = [ours] + [record(i, T0 + timedelta(seconds=i)) for i in range(1, 500)]
    records += [record(1000 + i, T0 - timedelta(minutes=1 + i)) for i in range(50)]
    executor = FakeExecutor(records)
    counter = iter(range(2000, 10_000))

    def newcomers(page: int) -> None:  # 37 new transactions land before every page read
        for _ in range(37):
            n = next(counter)
            executor.records.insert(0, record(n, T0 + timedelta(hours=1, seconds=n)))

    executor.before_page = newcomers
    found = await lookup_over(executor, page_size=50).find(payload("0xaa"), T0)
    assert found.complete
    assert [m.id for m in found.matches] == ["exec-0"]


async def test_a_list_that_is_not_newest_first_is_incomplete() -> None:
    # An executor listing in some other order proves nothing by running past the stamp.
    records = [record(i, T0 + timedelta(seconds=3 * i)) for i in range(1, 300)]
    executor = FakeExecutor(records)
    executor.records.reverse()  # oldest first
    found = await lookup_over(executor, page_size=100).find(payload("0xaa"), T0)
    assert not found.complete
    assert "not newest first" in found.reason


async def test_a_short_page_before_the_end_of_the_list_is_incomplete() -> None:
    class Capped(FakeExecutor):  # answers at most 50 however many are asked for
        async def list_page(self, page: int, per_page: int = 100) -> ExecutorPage:
            listed = await super().list_page(page, 50)
            return ExecutorPage(listed.items, listed.total_items)

    executor = Capped([record(i, T0 + timedelta(seconds=i)) for i in range(1, 300)])
    found = await lookup_over(executor, page_size=100).find(payload("0xaa"), T0)
    assert not found.complete
    assert "before the end of the list" in found.reason


async def test_a_match_with_another_gas_limit_or_speed_is_not_ours() -> None:
    ours = record(1, T0 + timedelta(seconds=1), gas_limit=90_000, speed="fast")
    other_gas = record(2, T0 + timedelta(seconds=2), gas_limit=50_000, speed="fast")
    other_speed = record(3, T0 + timedelta(seconds=3), gas_limit=90_000, speed="safeLow")
    executor = FakeExecutor([ours, other_gas, other_speed])
    wanted = payload() | {"gas_limit": 90_000, "speed": "fast"}
    found = await lookup_over(executor).find(wanted, T0)
    assert [m.id for m in found.matches] == ["exec-1"]


async def test_lookups_waiting_together_share_one_scan() -> None:
    records = [record(i, T0 + timedelta(seconds=i), data=f"0x{i:04x}") for i in range(1, 1000)]
    executor = FakeExecutor(records)
    lookup = lookup_over(executor, page_size=100)
    results = await asyncio.gather(*(lookup.find(payload(f"0x{i:04x}"), T0) for i in (5, 500, 990)))
    assert [[m.id for m in r.matches] for r in results] == [["exec-5"], ["exec-500"], ["exec-990"]]
    assert lookup.scans == 1
    assert len(executor.pages) == 10


def test_choose_takes_the_earliest_match_no_other_row_holds() -> None:
    a, b, c = (record(i, T0 + timedelta(seconds=i)) for i in (3, 1, 2))
    assert choose([a, b, c], taken=set()) is b
    assert choose([a, b, c], taken={"exec-1"}) is c
    assert choose([a, b, c], taken={"exec-1", "exec-2", "exec-3"}) is None


# --- the choice against every order of decisions ------------------------------------------------

SETTLE = 10.0
SKEW = 5.0


@dataclass(order=True)
class _Event:
    at: float
    seq: int
    kind: str = field(compare=False)
    row: int = field(compare=False)


def _simulate(seed: int, chooser: Any) -> tuple[int, int, int]:
    """Rows with one payload, some answered at once, some in doubt (their call may or may not
    have created a transaction), deciding in random order. Returns (rows, transactions,
    transactions held by no row) at the end."""
    rng = random.Random(seed)
    rows = rng.randint(2, 8)
    created: dict[str, float] = {}  # transaction -> creation time
    holder: dict[str, int] = {}  # transaction -> row
    own: dict[int, str] = {}
    stamp: dict[int, float] = {}
    events: list[_Event] = []
    seq = iter(range(1_000_000))

    def new_transaction(at: float) -> str:
        name = f"t{len(created)}"
        created[name] = at
        return name

    def decide(row: int, now: float) -> None:
        view = [
            record(int(name[1:]), T0 + timedelta(seconds=at))
            for name, at in created.items()
            if at <= now and at >= stamp[row] - SKEW
        ]
        taken = {f"exec-{name[1:]}" for name in holder}
        chosen = chooser(view, taken)
        if chosen is None:  # resubmit: answered at once and recorded
            name = new_transaction(now)
            holder[name] = row
        else:
            holder[f"t{chosen.id.removeprefix('exec-')}"] = row

    for row in range(rows):
        stamp[row] = rng.uniform(0, 30)
        answered = rng.random() < 0.4
        if answered or rng.random() < 0.7:  # its call created a transaction
            own[row] = new_transaction(stamp[row] + rng.uniform(0, SETTLE))
        if answered:  # recorded a little after the answer: free for a moment
            at = created[own[row]] + rng.uniform(0, 3)
            heapq.heappush(events, _Event(at, next(seq), "record", row))
        else:
            at = stamp[row] + SETTLE + rng.uniform(0, 40)
            heapq.heappush(events, _Event(at, next(seq), "decide", row))
    while events:
        event = heapq.heappop(events)
        if event.kind == "record" and own[event.row] not in holder:
            holder[own[event.row]] = event.row
        else:  # in doubt, or its answer was taken by another row's adoption
            decide(event.row, event.at)
    orphans = len(set(created) - set(holder))
    return rows, len(created), orphans


def test_every_row_gets_one_transaction_and_none_is_left_over_in_any_order() -> None:
    for seed in range(3000):
        rows, transactions, orphans = _simulate(seed, choose)
        assert (transactions, orphans) == (rows, 0), f"seed {seed}"


def test_the_simulation_catches_a_wrong_choice() -> None:
    # Taking the latest free match instead leaves transactions without a row.
    def latest(matches: list[ExecutorTx], taken: set[str]) -> ExecutorTx | None:
        free = [m for m in matches if m.id not in taken]
        return max(free, key=lambda m: m.created_at or T0) if free else None

    broken = [seed for seed in range(3000) if _simulate(seed, latest)[2] > 0]
    assert broken, "the simulation should tell a wrong choice from the right one"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_simulation_is_deterministic(seed: int) -> None:
    assert _simulate(seed, choose) == _simulate(seed, choose)
