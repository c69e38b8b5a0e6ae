"""Fault injection: latency, 5xx, 429 with ``after``, 400 for chosen ``to``, and the
admin and env knobs. Accept-then-hang over real HTTP is in test_process.py."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from stub_testkit import DEAD, Stub

from relayer_stub.faults.schemas import FaultConfig, LatencyConfig
from relayer_stub.faults.service import FaultInjector
from relayer_stub.settings import StubSettings

OTHER = "0x2222222222222222222222222222222222222222"


async def _statuses(stub: Stub, count: int) -> list[int]:
    return [(await stub.send()).status_code for _ in range(count)]


async def test_fixed_latency_delays_every_answer(stub: Stub) -> None:
    await stub.admin("PUT", "faults", {"latency": {"dist": "fixed", "ms": 150}})

    started = time.monotonic()
    response = await stub.send()
    elapsed = time.monotonic() - started

    assert response.status_code == 200
    assert elapsed >= 0.15
    assert (await stub.admin("GET", "faults"))["injected"]["latency"] == 1


def test_uniform_latency_draws_spread_within_the_bounds() -> None:
    faults = FaultInjector(
        FaultConfig(latency=LatencyConfig(dist="uniform", min_ms=10, max_ms=30), seed=1)
    )

    draws = [faults.latency_s() for _ in range(500)]

    assert all(0.010 <= d <= 0.030 for d in draws)
    assert max(draws) - min(draws) > 0.015


def test_normal_latency_is_clipped_at_zero_and_at_max_ms() -> None:
    faults = FaultInjector(
        FaultConfig(
            latency=LatencyConfig(dist="normal", mean_ms=10, stddev_ms=50, max_ms=40), seed=3
        )
    )

    draws = [faults.latency_s() for _ in range(2000)]

    assert min(draws) == 0.0
    assert max(draws) == 0.040
    assert 0.005 < sum(draws) / len(draws) < 0.030


def test_a_bare_number_is_fixed_latency_in_milliseconds() -> None:
    assert FaultConfig.model_validate({"latency": 25}).latency == LatencyConfig(dist="fixed", ms=25)


async def test_error_next_fails_exactly_the_next_n_requests_with_the_chosen_5xx(
    stub: Stub,
) -> None:
    await stub.admin("PUT", "faults", {"error_next": 2, "error_status": 503})

    first = await stub.send()
    statuses = [first.status_code, *await _statuses(stub, 3)]

    assert statuses == [503, 503, 200, 200]
    assert first.json() == {"success": False, "data": None, "error": "Service Unavailable"}
    assert (await stub.ledger())["count"] == 2
    assert (await stub.admin("GET", "faults"))["config"]["error_next"] == 0


async def test_a_seeded_error_rate_gives_the_same_pattern_each_time(stub: Stub) -> None:
    patterns = []
    for _ in range(2):
        await stub.admin("PUT", "faults", {"error_rate": 0.5, "seed": 7})
        patterns.append(await _statuses(stub, 30))

    assert patterns[0] == patterns[1]
    assert set(patterns[0]) == {200, 500}
    assert (await stub.ledger())["count"] == 2 * patterns[0].count(200)


async def test_rate_limit_next_answers_429_with_after_in_body_and_header(stub: Stub) -> None:
    await stub.admin("PUT", "faults", {"rate_limit_next": 1, "rate_limit_after_s": 3})

    limited = await stub.send()
    then = await stub.send()

    assert limited.status_code == 429
    assert limited.json() == {
        "success": False,
        "code": 429,
        "error": "TooManyRequests",
        "message": "Too Many Requests",
        "after": 3,
    }
    assert limited.headers["x-ratelimit-after"] == "3"
    assert then.status_code == 200
    assert (await stub.ledger())["count"] == 1


async def test_a_rate_limit_rate_of_one_limits_reads_as_well_as_sends(stub: Stub) -> None:
    created = await stub.send_ok()
    await stub.admin("PUT", "faults", {"rate_limit_rate": 1.0})

    assert await _statuses(stub, 3) == [429, 429, 429]
    assert (await stub.get(created["id"])).status_code == 429


async def test_scope_submit_faults_only_sends(stub: Stub) -> None:
    created = await stub.send_ok()
    await stub.admin("PUT", "faults", {"scope": "submit", "error_rate": 1.0})

    assert (await stub.get(created["id"])).status_code == 200
    assert (await stub.send()).status_code == 500


async def test_reject_to_answers_400_and_records_nothing(stub: Stub) -> None:
    await stub.admin("PUT", "faults", {"reject_to": [OTHER.upper().replace("0X", "0x")]})

    rejected = await stub.send(to=OTHER)
    accepted = await stub.send(to=DEAD)

    assert rejected.status_code == 400
    assert rejected.json() == {
        "success": False,
        "data": None,
        "error": "Transaction target address is not whitelisted",
    }
    assert accepted.status_code == 200
    assert (await stub.ledger(to=OTHER))["count"] == 0
    assert (await stub.ledger())["count"] == 1


async def test_accept_then_hang_records_and_executes_before_it_answers(stub: Stub) -> None:
    await stub.admin("PUT", "faults", {"hang_to": [OTHER], "hang_s": 5})

    hanging = asyncio.create_task(stub.send(to=OTHER))
    await asyncio.sleep(0.2)

    assert not hanging.done()
    ledger = await stub.ledger(to=OTHER)
    assert ledger["count"] == 1
    assert ledger["entries"][0]["hung"] is True
    tx = await stub.wait_for(ledger["entries"][0]["id"], "confirmed")
    assert tx["to"] == OTHER
    assert (await stub.admin("GET", "faults"))["hanging"] == 1
    hanging.cancel()


async def test_put_replaces_the_fault_config_and_an_empty_body_clears_it(stub: Stub) -> None:
    await stub.admin("PUT", "faults", {"error_rate": 1.0})
    await stub.admin("PUT", "faults", {"rate_limit_next": 1})
    assert await _statuses(stub, 2) == [429, 200]

    cleared = await stub.admin("PUT", "faults", {})

    assert cleared["config"] == FaultConfig().model_dump(mode="json")


async def test_patch_merges_into_the_fault_config(stub: Stub) -> None:
    await stub.admin("PUT", "faults", {"reject_to": [OTHER]})
    await stub.admin("PATCH", "faults", {"error_next": 1})

    assert await _statuses(stub, 1) == [500]
    assert (await stub.send(to=OTHER)).status_code == 400


@pytest.mark.parametrize(
    "body",
    [{"error_rate": 2}, {"error_status": 404}, {"no_such_knob": 1}, {"latency": {"dist": "x"}}],
)
async def test_an_invalid_fault_config_is_refused_with_422(stub: Stub, body: Any) -> None:
    response = await stub.client.put("/__admin/faults", json=body)

    assert response.status_code == 422


async def test_faults_from_the_environment_apply_from_the_start(
    stub_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STUB_FAULTS", json.dumps({"reject_to": [OTHER]}))
    monkeypatch.setenv("STUB_FAULTS__ERROR_NEXT", "1")
    monkeypatch.setenv("STUB_FAULTS__LATENCY", "20")
    settings = StubSettings(_env_file=None)  # type: ignore[call-arg]
    assert settings.faults.latency.ms == 20

    async with stub_factory(faults=settings.faults) as stub:
        assert (await stub.send()).status_code == 500
        assert (await stub.send(to=OTHER)).status_code == 400
        assert (await stub.send()).status_code == 200
        await stub.admin("POST", "reset")
        assert (await stub.admin("GET", "faults"))["config"]["reject_to"] == [OTHER]
