"""Scenarios against one relay API process (``bench.servers api``: the real app, served like
``relay serve``, with database round trips counted from outside):

- status lookups per tier (Redis hit, MySQL with Redis empty, upstream refresh), each request
  checked to have been answered by the tier it measures (``X-Cache``);
- the accept path at fixed offered rates from the load generator process;
- the fee budget's cost: the accept path at one rate for a client with a value budget and one
  with a fee budget on top, alternately, in the same API process (and the guard's own code in
  a loop, ``bench.guardcost``).

The pickup scenarios, against the same process, are in ``bench.pickup``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text

from bench import guardcost, infra, procstat, profiling, seed, stub
from bench.ceilings import CommitProbe
from bench.infra import Run, check
from relay_core import apikeys

# One wei and a gas limit: with ``--spend-policy`` every rule of the client's policy (and its
# daily budget's reservation) runs on every request; without it the same body costs nothing.
# No ``speed``: the normal lane (the executor's default speed, fast).
BODY = json.dumps({"to": infra.DEAD, "data": "0x", "value": "1", "gasLimit": "100000"})


@dataclass
class ApiServer:
    process: Any
    port: int
    database_url: str
    queue_name: str
    key: str
    client_id: str

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def db_counts(self, reset: bool = False) -> dict[str, Any]:
        # After an overload the server may still be working through its backlog.
        async with httpx.AsyncClient(base_url=self.base_url, timeout=120) as http:
            if reset:
                response = await http.post("/__bench/db/reset")
            else:
                response = await http.get("/__bench/db")
            response.raise_for_status()
            return dict(response.json())

    async def loop_stalls(self, since_epoch: float | None = None, reset: bool = False) -> Any:
        async with httpx.AsyncClient(base_url=self.base_url, timeout=120) as http:
            if reset:
                response = await http.post("/__bench/loop/reset")
            else:
                params = {"since": since_epoch} if since_epoch else None
                response = await http.get("/__bench/loop", params=params)
            response.raise_for_status()
            return response.json()

    async def loop_watch(self, on: bool) -> None:
        """Start or stop the server's loop watch (bench.loopwatch) and its timer."""
        async with httpx.AsyncClient(base_url=self.base_url, timeout=120) as http:
            response = await http.post(f"/__bench/loop/{'start' if on else 'stop'}")
            response.raise_for_status()

    async def ready(self, run: Run) -> bool:
        await run.wait_http(f"{self.base_url}/health", self.process)
        return True

    def spec(self, **fields: Any) -> dict[str, Any]:
        return {
            "port": self.port,
            "headers": {"X-API-Key": self.key, "Content-Type": "application/json"},
            "connections": 256,
            "timeout_s": 5.0,
            **fields,
        }


async def start_api_server(run: Run, label: str) -> ApiServer:
    """Scratch database, queues, a client key, and the API process (not yet answering)."""
    database_url = run.database(label)
    queue_name = f"bench-{run.run_id}-{label}"
    key = apikeys.generate_key()
    client_id = seed.create_client(
        database_url, key, spend_policy=os.environ.get("BENCH_SPEND_POLICY")
    )
    async with run.sqs_client(queue_name) as sqs:
        await run.create_queues(sqs, queue_name)
    process, port = run.spawn_server(f"api-{label}", "api", run.api_env(database_url, queue_name))
    return ApiServer(process, port, database_url, queue_name, key, client_id)


async def stop_api_server(run: Run, server: ApiServer) -> None:
    await run.stop_async(server.process)
    run.drop_database(server.database_url)


def query(database_url: str, sql: str, **params: Any) -> list[Any]:
    engine = create_engine(infra.sync_url(database_url))
    try:
        with engine.connect() as conn:
            return list(conn.execute(text(sql), params))
    finally:
        engine.dispose()


# --- status tiers --------------------------------------------------------------------------


async def status_tiers(
    run: Run,
    server: ApiServer,
    *,
    hit: tuple[int, float],
    miss: tuple[int, float],
    upstream: tuple[int, float],
    profile_dir: Path | None = None,
) -> dict[str, Any]:
    assert run.stub is not None
    await stub.stub_configure(run.stub, 0)
    db = server.database_url
    hot = seed.seed_rows(db, 100, client_id=server.client_id, status="confirmed")
    cold = seed.seed_rows(
        db, miss[0], client_id=server.client_id, status="confirmed", start_index=10**6
    )
    executor_ids = await stub.submit_to_stub(run.stub, upstream[0])
    stale = seed.seed_rows(
        db,
        upstream[0],
        client_id=server.client_id,
        status="submitted",
        executor_ids=executor_ids,
        start_index=2 * 10**6,
    )

    def paths(ids: list[str]) -> list[str]:
        return [f"/api/v1/relay/status/{tx_id}" for tx_id in ids]

    # Fill Redis for the hit tier (each first read is a miss that backfills).
    primed = await infra.run_loadgen(
        run,
        server.spec(
            method="GET",
            paths=paths(hot),
            rate=200,
            count=len(hot),
            expect_status=[200],
            expect_header={"X-Cache": "miss"},
        ),
        "status-prime",
    )
    check(primed["error_count"] == 0, f"status: priming reads failed {primed['errors']}")
    results: dict[str, Any] = {}
    for tier, ids, (count, rate) in (
        ("hit", hot, hit),
        ("miss", cold, miss),
        ("upstream", stale, upstream),
    ):
        await server.db_counts(reset=True)
        profiler = None
        if profile_dir is not None:
            profiler = profiling.start(server.process.pid, profile_dir / f"api-status-{tier}.txt")
        try:
            result = await infra.run_loadgen(
                run,
                server.spec(
                    method="GET",
                    paths=paths(ids),
                    rate=rate,
                    count=count,
                    expect_status=[200],
                    expect_header={"X-Cache": tier},
                ),
                f"status-{tier}",
            )
        finally:
            if profiler is not None:
                profiling.stop(profiler)
        counts = await server.db_counts()
        check(
            result["error_count"] == 0,
            f"status {tier}: {result['errors']} (answers by tier: {result['header_values']})",
        )
        result["db_round_trips_per_request"] = round(
            counts["totals"]["request"] / max(result["completed"], 1), 2
        )
        result["db_round_trips"] = counts["round_trips"]["request"]
        results[tier] = result
    return results


# --- accept path -------------------------------------------------------------------------


async def accept_path(
    run: Run,
    server: ApiServer,
    *,
    rates: list[int],
    duration_s: float,
    warmup_s: float,
    profile_dir: Path | None = None,
    profile_rate: int | None = None,
) -> list[dict[str, Any]]:
    post = {"method": "POST", "path": "/api/v1/relay/direct", "body": BODY, "expect_status": [202]}
    warm = await infra.run_loadgen(
        run, server.spec(**post, rate=100, duration_s=warmup_s), "accept-warmup"
    )
    check(warm["ok"] > 0, f"accept: warm-up failed {warm['errors']}")
    levels = []
    watched = {"api": server.process.pid} | run.server_pids()
    for rate in rates:
        await server.db_counts(reset=True)
        cpu_before = {k: procstat.cpu_seconds(p) or 0.0 for k, p in watched.items()}
        profiler = None
        if profile_dir is not None and rate == profile_rate:
            profiler = profiling.start(server.process.pid, profile_dir / f"api-accept-{rate}.txt")
        probe = CommitProbe(server.database_url)
        await probe.start()
        await server.loop_stalls(reset=True)
        result: dict[str, Any] = {}
        try:
            result = await infra.run_loadgen(
                run, server.spec(**post, rate=rate, duration_s=duration_s), f"accept-{rate}"
            )
        finally:
            result["commit_probe"] = await probe.stop(result.get("first_due_epoch"))
            result["api_loop"] = await server.loop_stalls(result.get("first_due_epoch"))
            if profiler is not None:
                profiling.stop(profiler)
        await asyncio.sleep(1.0)  # the publisher marks rows enqueued after the send
        counts = await server.db_counts()
        cpu = {
            k: round((procstat.cpu_seconds(p) or 0.0) - cpu_before[k], 2)
            for k, p in watched.items()
        }
        accepted = int(counts["http_requests"].get("POST /api/v1/relay/direct 202", 0))
        request_trips = counts["totals"]["request"]
        background_trips = counts["totals"]["background"]
        result.update(
            {
                "accepted": accepted,
                "db_round_trips_per_accepted": {
                    "request_path": round(request_trips / max(accepted, 1), 3),
                    "background": round(background_trips / max(accepted, 1), 3),
                    "total": round((request_trips + background_trips) / max(accepted, 1), 3),
                },
                "db_round_trips": counts["round_trips"],
                "db_connects": counts["connects"],
                "cpu_s": cpu,
                "api_cpu_ms_per_request": round(1000 * cpu["api"] / max(accepted, 1), 3),
            }
        )
        levels.append(result)
    pending = query(
        server.database_url,
        "SELECT COUNT(*) FROM transactions WHERE enqueued_at IS NULL AND status = 'pending'",
    )[0][0]
    check(all(level["accepted"] > 0 for level in levels), "accept: a level accepted nothing")
    for level in levels:
        level["rows_not_yet_enqueued_after_all_levels"] = int(pending)
    return levels


async def fee_budget_cost(
    run: Run, server: ApiServer, *, rate: int, duration_s: float, rounds: int
) -> dict[str, Any]:
    """API CPU per accepted request for a client without a fee budget (``off``: its policy's
    rules and a daily value budget) and one with it (``on``: those, ``maxFeeWei``,
    ``dailyFeeWei`` and the speeds), alternately ``rounds`` times at ``rate``, in the same
    process; then the guard's own code in a loop, both ways."""
    post = {"method": "POST", "path": "/api/v1/relay/direct", "body": BODY, "expect_status": [202]}
    variants = {}
    for variant, spend_policy in (("off", "budget"), ("on", "fees")):
        key = apikeys.generate_key()
        seed.create_client(server.database_url, key, f"fees-{variant}", spend_policy=spend_policy)
        variants[variant] = dataclasses.replace(server, key=key)
    measured: dict[str, list[float]] = {"off": [], "on": []}
    for round_no in range(rounds):
        for variant, client in variants.items():
            await server.db_counts(reset=True)
            before = procstat.cpu_seconds(server.process.pid) or 0.0
            result = await infra.run_loadgen(
                run,
                client.spec(**post, rate=rate, duration_s=duration_s),
                f"fees-{variant}-{round_no}",
            )
            await asyncio.sleep(0.5)  # the publisher's work after the answers is counted too
            cpu = (procstat.cpu_seconds(server.process.pid) or 0.0) - before
            counts = await server.db_counts()
            accepted = int(counts["http_requests"].get("POST /api/v1/relay/direct 202", 0))
            check(
                accepted > 0 and result["error_count"] == 0,
                f"fees ({variant}): {accepted} accepted, errors {result['errors']}",
            )
            measured[variant].append(round(1000 * cpu / accepted, 4))
    guard = (
        await guardcost.per_request_us(100_000),
        await guardcost.per_request_us(100_000, fees=True),
    )
    return {
        "rate": rate,
        "duration_s": duration_s,
        "api_cpu_ms_per_request": measured,
        "median_ms": {k: round(statistics.median(v), 4) for k, v in measured.items()},
        "guard_us": {"off": round(guard[0], 2), "on": round(guard[1], 2)},
    }
