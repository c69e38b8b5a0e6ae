"""How big a run is: the scenarios ``python -m bench`` knows, and the scale of each kind of
run (``Scale``: messages, rates, durations, cases), full, smoke and profile."""

from __future__ import annotations

from dataclasses import dataclass, field

SCENARIOS = (
    "ceilings",
    "overhead",
    "consumer",
    "pickup",
    "fastlane",
    "status",
    "accept",
    "batch",
    "fees",
)


@dataclass(frozen=True)
class Scale:
    sqs_messages: int
    db_seconds: float
    db_concurrency: tuple[int, ...]
    db_latency: tuple[int, float]  # rate, seconds
    http_seconds: float
    http_concurrency: int
    http_latency: tuple[int, float]  # rate, seconds
    consumer_messages: int
    consumer_max_s: float
    consumer_cases: tuple[tuple[int, int], ...]  # (executor latency ms, processes)
    accept_rates: tuple[int, ...]
    accept_seconds: float
    accept_warmup_s: float
    status_hit: tuple[int, float]  # requests, rate
    status_miss: tuple[int, float]
    status_upstream: tuple[int, float]
    pickup: tuple[int, float]  # samples, rate
    fast_pickup: tuple[int, int, float] = (20_000, 100, 10.0)  # normal backlog, samples, rate
    fees: tuple[int, float, int] = (500, 10.0, 3)  # rate, seconds, rounds (each way)
    batch: tuple[int, float, int] = (500, 10.0, 5)  # transactions/s, seconds, rounds (each shape)
    profile_rate: int | None = None
    parallel: bool = False
    notes: list[str] = field(default_factory=list)


CASES = ((0, 1), (200, 1), (0, 2), (200, 2))

FULL = Scale(
    sqs_messages=3000,
    db_seconds=3.0,
    db_concurrency=(1, 10, 20),
    db_latency=(500, 10.0),
    http_seconds=5.0,
    http_concurrency=32,
    http_latency=(500, 4.0),
    consumer_messages=3000,
    consumer_max_s=20.0,
    consumer_cases=CASES,
    # 1,000 req/s five times in a row: issue 18 asks for p99 <= 20 ms in at least 4 of 5
    accept_rates=(100, 250, 500, 1000, 1000, 1000, 1000, 1000),
    accept_seconds=20.0,
    accept_warmup_s=2.0,
    status_hit=(3000, 300.0),
    status_miss=(2000, 200.0),
    status_upstream=(300, 50.0),
    pickup=(150, 10.0),
)

SMOKE = Scale(
    sqs_messages=300,
    db_seconds=0.5,
    db_concurrency=(1, 10),
    db_latency=(100, 1.0),
    http_seconds=1.0,
    http_concurrency=16,
    http_latency=(100, 1.0),
    consumer_messages=200,
    consumer_max_s=30.0,
    # Both latencies and both process counts, in two scenarios instead of four.
    consumer_cases=((0, 1), (200, 2)),
    accept_rates=(50,),
    accept_seconds=2.0,
    accept_warmup_s=0.5,
    status_hit=(50, 50.0),
    status_miss=(40, 40.0),
    status_upstream=(10, 20.0),
    pickup=(8, 8.0),
    fast_pickup=(200, 5, 5.0),
    fees=(50, 1.0, 1),
    batch=(100, 1.0, 1),
    parallel=True,
)

# --profile: the consumer (0 and 200 ms) and the API at 200 req/s (a rate it sustains here,
# so the profile shows the cost of a request rather than of a backlog), with py-spy attached.
PROFILE = Scale(
    **{
        **FULL.__dict__,
        "consumer_cases": ((0, 1), (200, 1)),
        "accept_rates": (200,),
        "profile_rate": 200,
        "notes": [],
    }
)
