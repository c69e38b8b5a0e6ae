"""Spend policies at accept: each rule refuses with 403 naming it and writes nothing; the daily
budget is reserved in the database, one reservation at a time, so concurrent requests cannot
spend past it; an admin reads and changes policies over HTTP (and only an admin).

The budget across two API processes is in tests/test_policies_processes.py; the consumer's
check before submission in the queue-consumer's test_policies.py."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from api_testkit import DEAD, count_rows, signed_gasless
from sqlalchemy import select, update

from relay_api.runtime import Runtime
from relay_core.db.models import ApiClient, ClientSpend

OTHER = "0x1111111111111111111111111111111111111111"


@pytest.fixture
async def admin_key(new_key: Any) -> str:
    return str(await new_key("ops", admin=True))


async def _set(
    client: httpx.AsyncClient, admin_key: str, name: str, **changes: Any
) -> dict[str, Any]:
    response = await client.patch(
        f"/api/v1/admin/clients/{name}", json=changes, headers={"X-API-Key": admin_key}
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


async def _direct(client: httpx.AsyncClient, key: str, **body: Any) -> httpx.Response:
    return await client.post(
        "/api/v1/relay/direct", json={"to": DEAD, **body}, headers={"X-API-Key": key}
    )


def _refused(response: httpx.Response, rule: str) -> None:
    assert response.status_code == 403, response.text
    body = response.json()
    assert body["error"] == "policy_refused"
    assert body["detail"].startswith(f"policy {rule}: "), body


async def test_each_rule_refuses_with_403_naming_it_and_nothing_is_written(
    client: httpx.AsyncClient, runtime: Runtime, new_key: Any, admin_key: str
) -> None:
    key = await new_key("acme")
    await _set(client, admin_key, "acme", allowedTo=[OTHER])
    _refused(await _direct(client, key), "allowedTo")
    await _set(client, admin_key, "acme", allowedTo=[OTHER, DEAD], maxValueWei="100")
    _refused(await _direct(client, key, value="101"), "maxValueWei")
    await _set(client, admin_key, "acme", maxGas=50_000)
    _refused(await _direct(client, key), "maxGas")  # the gas limit must be named
    _refused(await _direct(client, key, gasLimit="50001"), "maxGas")
    gasless = signed_gasless(runtime.settings, value="1", gas="50000")
    refused = await client.post("/api/v1/relay/gasless", json=gasless, headers={"X-API-Key": key})
    _refused(refused, "gaslessValue")
    assert await count_rows(runtime) == 0

    # Within every rule, accepted; and gasless value once an operator allows it.
    assert (await _direct(client, key, value="100", gasLimit="50000")).status_code == 202
    shown = await _set(client, admin_key, "acme", gaslessValue=True)
    assert shown["policy"]["gaslessValue"] is True
    accepted = await client.post("/api/v1/relay/gasless", json=gasless, headers={"X-API-Key": key})
    assert accepted.status_code == 202, accepted.text
    # null clears a limit; [] allows any destination
    await _set(client, admin_key, "acme", allowedTo=[], maxValueWei=None, maxGas=None)
    assert (await _direct(client, key, to=OTHER, value="10000")).status_code == 202


async def test_the_daily_budget_holds_under_concurrent_requests(
    client: httpx.AsyncClient, runtime: Runtime, new_key: Any, admin_key: str
) -> None:
    key = await new_key("acme")
    await _set(client, admin_key, "acme", dailyValueWei="1000")
    answers = await asyncio.gather(*(_direct(client, key, value="100") for _ in range(25)))
    codes = sorted(a.status_code for a in answers)
    assert codes == [202] * 10 + [403] * 15
    for refused in (a for a in answers if a.status_code == 403):
        _refused(refused, "dailyValueWei")
    assert await count_rows(runtime) == 10
    shown = await client.get("/api/v1/admin/clients/acme", headers={"X-API-Key": admin_key})
    assert shown.json()["spentLast24hWei"] == "1000"
    # Zero-value transactions cost nothing from the budget.
    assert (await _direct(client, key)).status_code == 202
    # Raising the budget lets more through at once (the reservation reads it fresh).
    await _set(client, admin_key, "acme", dailyValueWei="1100")
    assert (await _direct(client, key, value="100")).status_code == 202
    assert (await _direct(client, key, value="1")).status_code == 403
    async with runtime.sessions() as session:
        buckets = (await session.execute(select(ClientSpend.value_wei))).scalars().all()
    assert sum(int(v) for v in buckets) == 1100  # one bucket, or two across five minutes


async def _reserved(runtime: Runtime) -> int:
    async with runtime.sessions() as session:
        return sum(int(v) for v in (await session.scalars(select(ClientSpend.value_wei))))


async def test_a_budget_far_from_spent_is_leased_and_still_spent_exactly(
    client: httpx.AsyncClient, runtime: Runtime, new_key: Any, admin_key: str
) -> None:
    key = await new_key("acme")
    await _set(
        client, admin_key, "acme", dailyValueWei="3200", rateLimitPerS=5000.0, rateLimitBurst=5000
    )
    # 3,200 wei in 10s: leases of 100 while more than 800 stays unleased, then exactly.
    answers = await asyncio.gather(*(_direct(client, key, value="10") for _ in range(360)))
    accepted = sum(a.status_code == 202 for a in answers)
    assert accepted * 10 <= 3200
    assert {a.status_code for a in answers} <= {202, 403}
    # A handful of lease transactions, not one locking reservation per request.
    assert runtime.budgets.lease_calls <= 30, runtime.budgets.lease_calls
    # A replayed request reserves nothing (its reservation is given back to the lease).
    headers = {"X-API-Key": key, "Idempotency-Key": "once"}
    for _ in range(2):
        replayed = await client.post(
            "/api/v1/relay/direct", json={"to": DEAD, "value": "0"}, headers=headers
        )
        assert replayed.status_code == 202, replayed.text
    # With the leases given back, what is reserved is what was accepted, and the rest of
    # the budget can still be spent, to the last wei and not one more.
    await runtime.budgets.close()
    assert await _reserved(runtime) == accepted * 10
    while (await _direct(client, key, value="10")).status_code == 202:
        accepted += 1
    assert accepted == 320
    assert await _reserved(runtime) == 3200
    assert await count_rows(runtime) == 321


async def test_a_lease_given_back_on_a_duplicate_leaves_the_budget_whole(
    client: httpx.AsyncClient, runtime: Runtime, new_key: Any, admin_key: str
) -> None:
    key = await new_key("acme")
    await _set(client, admin_key, "acme", dailyValueWei="3200")
    headers = {"X-API-Key": key, "Idempotency-Key": "pay-once"}
    for _ in range(5):
        answer = await client.post(
            "/api/v1/relay/direct", json={"to": DEAD, "value": "10"}, headers=headers
        )
        assert answer.status_code == 202, answer.text
    assert runtime.budgets.lease_calls == 1
    await runtime.budgets.close()
    assert await _reserved(runtime) == 10  # the four replays gave theirs back


async def test_a_retry_of_an_accepted_request_is_replayed_after_the_budget_ran_out(
    client: httpx.AsyncClient, runtime: Runtime, new_key: Any, admin_key: str
) -> None:
    key = await new_key("acme")
    await _set(client, admin_key, "acme", dailyValueWei="100")
    headers = {"X-API-Key": key, "Idempotency-Key": "pay-1"}
    body = {"to": DEAD, "value": "100"}
    first = await client.post("/api/v1/relay/direct", json=body, headers=headers)
    again = await client.post("/api/v1/relay/direct", json=body, headers=headers)
    assert first.status_code == again.status_code == 202
    assert again.json()["transactionId"] == first.json()["transactionId"]
    assert again.headers["Idempotent-Replayed"] == "true"
    other = {**headers, "Idempotency-Key": "pay-2"}
    _refused(await client.post("/api/v1/relay/direct", json=body, headers=other), "dailyValueWei")


async def test_only_an_admin_reads_or_changes_policies_and_bad_values_are_named(
    client: httpx.AsyncClient, new_key: Any, admin_key: str
) -> None:
    key = await new_key("acme")
    for request in (
        client.get("/api/v1/admin/clients/acme", headers={"X-API-Key": key}),
        client.patch("/api/v1/admin/clients/acme", json={"maxGas": 1}, headers={"X-API-Key": key}),
    ):
        response = await request
        assert response.status_code == 403, response.text
    admin = {"X-API-Key": admin_key}
    missing = await client.get("/api/v1/admin/clients/nobody", headers=admin)
    assert missing.status_code == 404
    for changes, field in (
        ({"maxGas": 100}, "maxGas"),
        ({"maxValueWei": "-1"}, "maxValueWei"),
        ({"allowedTo": ["0x12"]}, "allowedTo"),
        ({"rateLimitPerS": 5}, "rateLimitPerS"),
        # Positive, but stored as 0 in the single-precision column: every request of the
        # client would then have failed (found by the fuzzer on its own admin key).
        ({"rateLimitPerS": 1e-50, "rateLimitBurst": 1}, "rateLimitPerS"),
        ({"spendEverything": True}, "spendEverything"),
    ):
        response = await client.patch("/api/v1/admin/clients/acme", json=changes, headers=admin)
        assert response.status_code in (400, 422), response.text
        assert field in response.text
    shown = (await client.get("/api/v1/admin/clients/acme", headers=admin)).json()
    assert shown["policy"] | {"grantedAt": None} == {
        "granted": True,
        "unlimited": True,
        "grantedAt": None,
        "grantedBy": "the test",
        "allowedTo": [],
        "maxValueWei": None,
        "dailyValueWei": None,
        "maxGas": None,
        "gaslessValue": False,
        "maxFeeWei": None,
        "dailyFeeWei": None,
        "speeds": [],
    }
    assert shown["rateLimit"]["own"] is False
    changed = await _set(client, admin_key, "acme", rateLimitPerS=5, rateLimitBurst=10)
    assert changed["rateLimit"] == {"perSecond": 5.0, "burst": 10, "own": True}
    # A JSON Schema integer may be written with ".0" (the fuzzer's 8922.0 was refused 422);
    # a fraction, a bool or a string still is not one.
    changed = await _set(client, admin_key, "acme", rateLimitPerS=5, rateLimitBurst=8922.0)
    assert changed["rateLimit"]["burst"] == 8922
    changed = await _set(client, admin_key, "acme", maxGas=50000.0)
    assert changed["policy"]["maxGas"] == 50000
    for burst in (8922.5, True, "10"):
        response = await client.patch(
            "/api/v1/admin/clients/acme",
            json={"rateLimitPerS": 5, "rateLimitBurst": burst},
            headers=admin,
        )
        assert response.status_code == 422, response.text


async def test_a_rate_limit_stored_around_the_api_out_of_bounds_leaves_the_client_working(
    client: httpx.AsyncClient, new_key: Any, runtime: Runtime
) -> None:
    key = await new_key("acme")
    async with runtime.sessions() as session, session.begin():
        await session.execute(
            update(ApiClient)
            .where(ApiClient.name == "acme")
            .values(rate_limit_per_s=0.0, rate_limit_burst=0)
        )
    response = await _direct(client, key)
    assert response.status_code == 202, response.text


async def test_fee_rules_judge_the_most_a_transaction_can_cost_at_its_speed(
    client: httpx.AsyncClient, runtime: Runtime, new_key: Any, admin_key: str
) -> None:
    # No chain here: a unit of gas costs at most RELAY_MAX_FEE_PER_GAS_WEI x the speed's
    # factor (fast 1.5x, fastest 2x).
    price = runtime.settings.max_fee_per_gas_wei
    key = await new_key("acme")
    shown = await _set(
        client,
        admin_key,
        "acme",
        maxFeeWei=str(21_000 * price * 3 // 2),
        speeds=["fast", "fastest"],
    )
    assert (shown["policy"]["speeds"], shown["policy"]["unlimited"]) == (["fast", "fastest"], False)
    _refused(await _direct(client, key, speed="fast"), "maxFeeWei")  # gasLimit is needed
    assert (await _direct(client, key, gasLimit="21000", speed="fast")).status_code == 202
    _refused(await _direct(client, key, gasLimit="21000", speed="fastest"), "maxFeeWei")
    _refused(await _direct(client, key, gasLimit="21000", speed="safeLow"), "speeds")
    assert await count_rows(runtime) == 1
