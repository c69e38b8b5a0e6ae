"""Chain mode, measured once: transactions confirmed per second through the whole system.

``python -m bench.chain [--transactions 1000] [--kind direct|gasless] [--block-time 0]
[--relayers 1,4] [--rpc-latency-ms 0] [--webhooks]``

The API, one consumer and the relayer-stub in chain mode (signing and broadcasting on anvil,
statuses from receipts), on MariaDB, Redis and a local SQS server like
``make bench``; with ``--relayers 1,4`` the same measure once per pool size (the stub serving
that many relayers, each its own anvil account and serial sender, and Relay spreading over
them), in one run, with the rates' ratio. Transactions are submitted as fast as 32 concurrent
clients can; the clock runs from the first 202 to the last ``confirmed`` row, and the
processes' CPU is read once every confirmed row's cost is recorded (the consumer's receipt
pass, the last of Relay's work for a transaction). Direct ones are 1-wei transfers to one payee
(its balance must end at the count); gasless ones are ``RelayRecipient.record`` calls from
distinct signers (each signer's first nonce), executed through the forwarder.
``--rpc-latency-ms`` has the stub wait that long before each of its calls to the node, as a
hosted node's round trip would: on loopback a relayer's serial sender never waits, so one
relayer is limited only by the machine's CPU, and a pool cannot show its gain.
As shipped, the executor sends no webhooks (an OZ Relayer with no notification configured):
Relay hears of each transaction from the executor's submit answer, the consumer's follower
(the executor's lists, every second), its tracker and its receipt pass. ``--webhooks``: the
executor also POSTs each status change to the API, signed, as a configured notification does.
Before the runs, the same run measures a ceiling: the CPU a bare FastAPI endpoint on one
uvicorn worker spends per request (``bench.ceilings``, closed loop for 5 s), and each run's
Relay CPU per confirmed transaction is also given in those requests
(``relay_cpu_per_confirmed_in_bare_requests``), a figure that moves less than milliseconds
between machines (the bare request itself cost 62 to 116 µs on the machines of this repo's
results).
Each run first measures what Relay's processes spend a second idle (``IDLE_S``, nothing
submitted yet: timers, polls, watches), and how much of the CPU per confirmed transaction that
is over the run's length (``relay_idle_cpu_ms_per_confirmed``).
Writes ``bench/results/chain-<kind>-<UTC time>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from eth_account import Account
from eth_utils import keccak

from bench import ceilings, chain_rows, procstat
from bench.infra import ROOT, Run, check
from relay_core import ethereum, evm
from relay_devstack import localchain
from relay_devstack.localsqs import free_port
from relay_testkit import new_api_key, start_stub

RESULTS = ROOT / "bench" / "results"
WEBHOOK_KEY = "bench-chain-webhook-signing-key-0123456789"
GAS = 200_000
IDLE_S = 5.0


def _float_or_none(value: str | None) -> float | None:
    return None if value is None else float(value)


async def measure(
    transactions: int,
    kind: str,
    block_time_s: float,
    relayers: int = 1,
    rpc_latency_ms: float = 0.0,
    webhooks: bool = False,
    consumer_settings: dict[str, str] | None = None,
) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="relay-bench-chain-"))
    async with Run.open(workdir, "ministack") as run:
        chain = localchain.start(block_time_s=block_time_s, log_path=workdir / "anvil.log")
        try:
            deployment = await localchain.deploy(chain.rpc_url)
            api_port = free_port()
            api_url = f"http://127.0.0.1:{api_port}"
            pool = ",".join(f"relayer-{n}" for n in range(1, relayers + 1))
            stub_dir = workdir / "chain-stub"
            stub_dir.mkdir()
            stub = start_stub(
                stub_dir,
                STUB_CHAIN_RPC_URL=chain.rpc_url,
                STUB_CHAIN_POLL_INTERVAL_S="0.05",
                STUB_CHAIN_RPC_LATENCY_MS=str(rpc_latency_ms),
                STUB_LOG_LEVEL="WARNING",
                STUB_RELAYER_IDS=pool,
                **(
                    {
                        "STUB_WEBHOOK_URL": f"{api_url}/api/v1/webhooks/oz-relayer",
                        "STUB_WEBHOOK_SIGNING_KEY": WEBHOOK_KEY,
                    }
                    if webhooks
                    else {}
                ),
            )
            run.extra_stubs.append(stub)
            database_url = run.database("chain")
            queue = f"bench-chain-{run.run_id}"
            async with run.sqs_client(queue) as sqs:
                await run.create_queues(sqs, queue)
            chain_env = {
                "RELAY_EXECUTOR_URL": stub.base_url,
                "RELAY_CHAIN_RPC_URL": chain.rpc_url,
                "RELAY_CHAIN_ID": str(deployment.chain_id),
                "RELAY_FORWARDER_ADDRESS": deployment.forwarder,
                "RELAY_EXECUTOR_RELAYERS": pool,
            }
            api_env = {
                **run.api_env(database_url, queue),
                **chain_env,
                "PORT": str(api_port),
                "RELAY_WEBHOOK_SIGNING_KEY": WEBHOOK_KEY,
            }
            key = await asyncio.to_thread(_create_key, api_env)
            api = run.spawn("api", ["-m", "relay_api.cli", "serve"], api_env)
            consumer_env = {**run.consumer_env(database_url, queue, 0), **chain_env}
            for name, value in (consumer_settings or {}).items():
                consumer_env[f"RELAY_{name.upper()}"] = value
            consumer = run.spawn("consumer", ["-m", "queue_consumer.main"], consumer_env)
            await run.wait_http(f"{api_url}/health", api)
            await run.wait_consumer_polling(queue, 0, consumer)
            payee = Account.create().address
            bodies = await _bodies(api_url, key, kind, transactions, deployment, payee)
            assert stub.process is not None
            pids = {
                "api": api.pid,
                "consumer": consumer.pid,
                "stub": stub.process.pid,
                "anvil": chain.process.pid,
            }
            idle = await _idle_cpu(pids)
            before = {name: procstat.cpu_seconds(pid) or 0.0 for name, pid in pids.items()}
            started = time.monotonic()
            await _submit(api_url, key, kind, bodies)
            accepted_s = time.monotonic() - started
            deadline = started + 600
            while (counts := chain_rows.counts(database_url)).get("confirmed", 0) < transactions:
                check(time.monotonic() < deadline, f"not all confirmed in 600 s: {counts}")
                check(
                    not counts.get("failed"),
                    f"failures: {counts}: {chain_rows.errors(database_url)}",
                )
                await asyncio.sleep(0.25)
            elapsed = time.monotonic() - started
            # Relay's work for a transaction ends when the consumer has read what it cost
            # from its receipt (a pass every tracker interval): the CPU is read after that.
            while chain_rows.counts(database_url, "fee_wei IS NULL").get("confirmed", 0):
                check(time.monotonic() < deadline, "costs not all recorded in 600 s")
                await asyncio.sleep(0.25)
            costs_recorded_s = time.monotonic() - started
            after = {name: procstat.cpu_seconds(pid) or 0.0 for name, pid in pids.items()}
            latencies = chain_rows.latencies(database_url)
            heard_after = chain_rows.heard_after(database_url)
            rpc = evm.EvmRpc(chain.rpc_url)
            try:
                if kind == "direct":
                    check(await rpc.balance(payee) == transactions, "payee balance is wrong")
                else:
                    recorded = await rpc.eth_call(
                        {
                            "to": deployment.recipient,
                            "data": "0x" + keccak(text="count()")[:4].hex(),
                        }
                    )
                    check(int(recorded, 16) == transactions, "recipient count is wrong")
                blocks = await rpc.block_number()
            finally:
                await rpc.aclose()
            return {
                "kind": kind,
                "transactions": transactions,
                "block_time_s": block_time_s,
                "stub_rpc_latency_ms": rpc_latency_ms,
                "blocks": blocks,
                "accept_s": round(accepted_s, 2),
                "first_202_to_last_confirmed_s": round(elapsed, 2),
                "first_202_to_last_cost_recorded_s": round(costs_recorded_s, 2),
                "confirmed_per_s": round(transactions / elapsed, 1),
                "latency_accept_to_confirmed_s": chain_rows.summary(latencies),
                "confirmed_heard_after_s": chain_rows.summary(heard_after),
                "relayers": relayers,
                "webhooks": webhooks,
                "follow_interval_s": _float_or_none(
                    (consumer_settings or {}).get("tracker_follow_interval_s")
                ),
                "consumer_settings": consumer_settings or {},
                "cpu_s": {k: round(after[k] - before[k], 2) for k in after},
                # What each process spends a second with nothing to do (its timers, polls
                # and watches), measured before the submission: over the run, up to the last
                # cost recorded, this much of its CPU per transaction is not the transactions'.
                "idle_cpu_ms_per_s": idle,
                "relay_idle_cpu_ms_per_confirmed": round(
                    (idle["api"] + idle["consumer"]) * costs_recorded_s / transactions, 2
                ),
                # Relay's own processes (the executor's webhooks and the tracker included)
                "relay_cpu_ms_per_confirmed": round(
                    1000 * sum(after[k] - before[k] for k in ("api", "consumer")) / transactions,
                    2,
                ),
                "stub_stats": await _stub_stats(stub.base_url),
            }
        finally:
            chain.stop()


async def _idle_cpu(pids: dict[str, int]) -> dict[str, float]:
    """Each process's CPU milliseconds per second over ``IDLE_S`` with nothing submitted."""
    before = {name: procstat.cpu_seconds(pid) or 0.0 for name, pid in pids.items()}
    await asyncio.sleep(IDLE_S)
    return {
        name: round(1000 * ((procstat.cpu_seconds(pid) or 0.0) - before[name]) / IDLE_S, 1)
        for name, pid in pids.items()
    }


async def bare_ceiling() -> dict[str, Any]:
    """The bare endpoint's CPU per request, measured here and now (see the module docstring)."""
    workdir = Path(tempfile.mkdtemp(prefix="relay-bench-chain-ceiling-"))
    async with Run.open(workdir, "ministack") as run:
        http = await ceilings.http_ceiling(run, 5.0, 32, 100, 1.0)
    return {
        "bare_endpoint_cpu_us_per_request": http["server_cpu_us_per_request"],
        "bare_endpoint_rate": http["rate"],
    }


def _create_key(env: dict[str, str]) -> str:
    """A client whose rate limit the load stays under (the limiter still runs)."""
    return new_api_key({**os.environ, **env}, "bench-chain", rate_per_s=100_000, burst=100_000)


async def _stub_stats(base_url: str) -> Any:
    async with httpx.AsyncClient(base_url=base_url) as http:
        return (await http.get("/__admin/stats")).json()["lifecycle"]


async def _bodies(
    api_url: str,
    key: str,
    kind: str,
    count: int,
    deployment: localchain.Deployment,
    payee: str,
) -> list[dict[str, Any]]:
    if kind == "direct":
        return [{"to": payee, "value": "1", "data": "0x"} for _ in range(count)]
    async with httpx.AsyncClient(base_url=api_url, headers={"X-API-Key": key}) as http:
        served = (await http.get("/api/v1/relay/gasless/domain")).json()["domain"]
    domain = ethereum.ForwarderDomain(
        served["name"], served["version"], served["chainId"], served["verifyingContract"]
    )
    bodies = []
    for tag in range(count):
        signer = Account.create()
        data = "0x" + keccak(text="record(uint256)")[:4].hex() + f"{tag:064x}"
        deadline = int(time.time()) + 3600
        forward = ethereum.ForwardRequest(
            signer.address, deployment.recipient, 0, GAS, 0, deadline, data
        )
        request = {
            "from": signer.address,
            "to": deployment.recipient,
            "value": "0",
            "gas": str(GAS),
            "nonce": "0",
            "deadline": deadline,
            "data": data,
        }
        signature = ethereum.sign_forward_request(domain, forward, signer.key)
        bodies.append({"request": request, "signature": signature})
    return bodies


async def _submit(api_url: str, key: str, kind: str, bodies: list[dict[str, Any]]) -> None:
    limit = asyncio.Semaphore(32)
    async with httpx.AsyncClient(base_url=api_url, headers={"X-API-Key": key}, timeout=30) as http:

        async def one(body: dict[str, Any]) -> None:
            async with limit:
                response = await http.post(f"/api/v1/relay/{kind}", json=body)
            check(response.status_code == 202, response.text)

        await asyncio.gather(*(one(body) for body in bodies))


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chain", description=__doc__)
    parser.add_argument("--transactions", type=int, default=1000)
    parser.add_argument("--kind", choices=("direct", "gasless"), default="direct")
    parser.add_argument("--block-time", type=float, default=0.0, help="0: a block per send")
    parser.add_argument(
        "--rpc-latency-ms",
        type=float,
        default=0.0,
        help="added by the stub to each of its calls to the node, standing for a remote node "
        "(0: loopback anvil as it is)",
    )
    parser.add_argument(
        "--relayers",
        default="1",
        help="pool sizes to measure one after the other in this run, e.g. 1,4 (the first is "
        "the base of the rates' ratio)",
    )
    parser.add_argument(
        "--webhooks",
        action="store_true",
        help="the executor also sends its signed webhooks to the API (as shipped it sends none: "
        "Relay hears from its follower, tracker and receipt pass)",
    )
    parser.add_argument(
        "--follow-interval-s",
        type=float,
        default=None,
        help="the consumer's RELAY_TRACKER_FOLLOW_INTERVAL_S (0: no follower; default: the "
        "shipped one)",
    )
    parser.add_argument(
        "--consumer-setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a consumer setting for this run (RELAY_<NAME>), e.g. tracker_stale_s=60; repeatable",
    )
    args = parser.parse_args()
    consumer_settings = dict(item.split("=", 1) for item in args.consumer_setting)
    if args.follow_interval_s is not None:
        consumer_settings["tracker_follow_interval_s"] = str(args.follow_interval_s)
    sizes = [int(n) for n in args.relayers.split(",") if n.strip()]
    ceiling = asyncio.run(bare_ceiling())
    runs = [
        asyncio.run(
            measure(
                args.transactions,
                args.kind,
                args.block_time,
                size,
                args.rpc_latency_ms,
                webhooks=args.webhooks,
                consumer_settings=consumer_settings,
            )
        )
        for size in sizes
    ]
    bare_us = ceiling["bare_endpoint_cpu_us_per_request"]
    for measured in runs:
        measured["relay_cpu_per_confirmed_in_bare_requests"] = round(
            1000 * measured["relay_cpu_ms_per_confirmed"] / bare_us, 1
        )
    result: dict[str, Any] = runs[0] if len(runs) == 1 else {"runs": runs}
    result["ceiling"] = ceiling
    if len(runs) > 1:
        base = runs[0]["confirmed_per_s"]
        result["ratio_to_first"] = [round(r["confirmed_per_s"] / base, 2) for r in runs]
    result["machine"] = {"cpus": os.cpu_count()}
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"chain-{args.kind}-{stamp}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))  # noqa: T201
    print(f"results: {path.relative_to(ROOT)}")  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
