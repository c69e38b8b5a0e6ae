"""A client's daily budget holds across API replicas: two `relay serve` processes on one
database, requests split between them (most at once), and exactly the budget is accepted,
whether each transaction reserves its value (a budget near its end, or large values) or the
processes lease slices of it (a budget far from spent). The operator sets the budget and reads
what was spent with the `relay` command."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from relay_core import queue as queue_mod
from relay_core.settings import InfraSettings
from relay_devstack.localsqs import free_port, stop_process
from relay_testkit import infra_process_env, new_api_key, relay_command, wait_http

DEAD = "0x000000000000000000000000000000000000dEaD"


@asynccontextmanager
async def two_apis(
    env: dict[str, str], log_path: Path
) -> AsyncIterator[tuple[list[int], httpx.AsyncClient]]:
    """Two `relay serve` processes on one database (stopped, gracefully, on the way out)."""
    ports = [free_port(), free_port()]
    processes: list[subprocess.Popen[bytes]] = []
    with open(log_path, "ab") as log:
        try:
            for port in ports:
                processes.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "relay_api.cli", "serve"],
                        env={**env, "PORT": str(port)},
                        stdout=log,
                        stderr=log,
                    )
                )
            for port, process in zip(ports, processes, strict=True):
                wait_http(f"http://127.0.0.1:{port}/health", process)
            async with httpx.AsyncClient(timeout=30) as http:
                yield ports, http
        finally:
            for process in processes:
                stop_process(process)


def payer(
    http: httpx.AsyncClient, ports: list[int], key: str, value: int
) -> Callable[[int], Awaitable[httpx.Response]]:
    async def pay(i: int) -> httpx.Response:
        return await http.post(
            f"http://127.0.0.1:{ports[i % 2]}/api/v1/relay/direct",
            json={"to": DEAD, "data": f"0x{i:06x}", "value": str(value)},
            headers={"X-API-Key": key},
        )

    return pay


@pytest.mark.timeout(120)
async def test_a_daily_budget_holds_across_two_api_processes(
    infra_env: dict[str, Any], sqs: Any, tmp_path: Path
) -> None:
    await queue_mod.create_queues(sqs, InfraSettings(**infra_env))
    env = infra_process_env(infra_env)
    key = new_api_key(env, "payer", rate_per_s=1000, burst=2000)
    shown = relay_command(env, "clients", "policy", "payer", "--daily-value", "1000")
    assert "daily budget  1000 wei" in shown, shown

    async with two_apis(env, tmp_path / "api.log") as (ports, http):
        pay = payer(http, ports, key, 100)
        # A few one after the other, so each replica spends some of the budget, then the
        # rest at once, racing for what is left of it.
        answers = [await pay(i) for i in range(4)]
        answers += await asyncio.gather(*(pay(i) for i in range(4, 40)))
    accepted = [a for a in answers if a.status_code == 202]
    refused = [a for a in answers if a.status_code == 403]
    assert (len(accepted), len(refused)) == (10, 30), [a.text for a in answers]
    assert all(r.json()["detail"].startswith("policy dailyValueWei: ") for r in refused)
    # Both replicas accepted some: the budget was shared, not held per process.
    served_by = {str(a.request.url.port) for a in accepted}
    assert served_by == {str(p) for p in ports}, served_by
    shown = relay_command(env, "clients", "show", "payer")
    assert "reserved in the last 24 hours: 1000 wei" in shown, shown


@pytest.mark.timeout(120)
async def test_leases_of_a_budget_never_let_two_processes_spend_past_it(
    infra_env: dict[str, Any], sqs: Any, tmp_path: Path
) -> None:
    await queue_mod.create_queues(sqs, InfraSettings(**infra_env))
    env = {**infra_process_env(infra_env), "RELAY_BUDGET_LEASE_S": "1"}
    key = new_api_key(env, "payer", rate_per_s=5000, burst=5000)
    relay_command(env, "clients", "policy", "payer", "--daily-value", "3200")

    async with two_apis(env, tmp_path / "api.log") as (ports, http):
        pay = payer(http, ports, key, 10)
        # 3,200 wei in 10s, 400 asked for at once in waves: both processes lease slices.
        answers: list[httpx.Response] = []
        for wave in range(8):
            answers += await asyncio.gather(*(pay(wave * 50 + i) for i in range(50)))
        first = sum(a.status_code == 202 for a in answers)
        assert first * 10 <= 3200
        assert {a.status_code for a in answers} == {202, 403}
        # Once the leases have ended and their rests are back, the rest of the budget is
        # there to spend, and not a wei more.
        await asyncio.sleep(2.5)
        later = [await pay(1000 + i) for i in range(330 - first)]
    total = first + sum(a.status_code == 202 for a in later)
    assert total == 320, (first, total)
    shown = relay_command(env, "clients", "show", "payer")
    assert "reserved in the last 24 hours: 3200 wei" in shown, shown


@pytest.mark.timeout(120)
async def test_a_daily_fee_budget_holds_across_two_api_processes(
    infra_env: dict[str, Any], sqs: Any, tmp_path: Path
) -> None:
    """Each transaction reserves the most it can cost in fees: its gas limit times the most a
    unit of gas can cost at its speed (here, with no chain, RELAY_MAX_FEE_PER_GAS_WEI: 10 wei
    at safeLow, 20 at fastest), so 21,000 gas at safeLow reserves 210,000 wei."""
    await queue_mod.create_queues(sqs, InfraSettings(**infra_env))
    env = {**infra_process_env(infra_env), "RELAY_MAX_FEE_PER_GAS_WEI": "10"}
    key = new_api_key(env, "payer", rate_per_s=1000, burst=2000)
    shown = relay_command(env, "clients", "policy", "payer", "--daily-fee", "2100000")
    assert "fee budget    2100000 wei" in shown, shown

    async with two_apis(env, tmp_path / "api.log") as (ports, http):

        async def pay(i: int, **body: Any) -> httpx.Response:
            return await http.post(
                f"http://127.0.0.1:{ports[i % 2]}/api/v1/relay/direct",
                json={"to": DEAD, "data": f"0x{i:06x}", "gasLimit": "21000", **body},
                headers={"X-API-Key": key},
            )

        no_limit = await http.post(
            f"http://127.0.0.1:{ports[0]}/api/v1/relay/direct",
            json={"to": DEAD},
            headers={"X-API-Key": key},
        )
        assert no_limit.status_code == 403
        assert "gasLimit is required" in no_limit.json()["detail"], no_limit.text
        answers = [await pay(i, speed="safeLow") for i in range(4)]
        answers += await asyncio.gather(*(pay(i, speed="safeLow") for i in range(4, 40)))
    accepted = [a for a in answers if a.status_code == 202]
    refused = [a for a in answers if a.status_code == 403]
    assert (len(accepted), len(refused)) == (10, 30), [a.text for a in answers]
    assert all(r.json()["detail"].startswith("policy dailyFeeWei: ") for r in refused)
    assert {str(a.request.url.port) for a in accepted} == {str(p) for p in ports}
    shown = relay_command(env, "clients", "show", "payer")
    assert "reserved in the last 24 hours: 2100000 wei" in shown, shown
