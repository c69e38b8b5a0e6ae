"""A request whose transaction the database chose as a deadlock's victim is done again, not
answered 503: the server rolled all of it back (a batch's INSERT and the outbox's UPDATE of
``enqueued_at`` can deadlock on the transactions table's indexes, as the fuzzer found)."""

from __future__ import annotations

from typing import Any

import asyncmy.errors
import httpx
import pytest
from api_testkit import DEAD, count_rows
from sqlalchemy.exc import OperationalError

from relay_api.deps import UnitOfWork, unit_of_work
from relay_api.relay import repository
from relay_api.runtime import Runtime

BATCH = "/api/v1/relay/batch"
DIRECT = "/api/v1/relay/direct"


def _deadlocking(monkeypatch: pytest.MonkeyPatch, times: int) -> list[int]:
    """The accept's INSERT is a deadlock's victim ``times`` times, then runs; each try's
    row count."""
    add = repository.add
    tries: list[int] = []

    async def deadlocked(uow: Any, rows: list[dict[str, Any]]) -> bool:
        tries.append(len(rows))
        if len(tries) <= times:
            error = asyncmy.errors.OperationalError(1213, "Deadlock found when trying to get lock")
            raise OperationalError("INSERT INTO transactions ...", {}, error)
        return await add(uow, rows)

    monkeypatch.setattr(repository, "add", deadlocked)
    return tries


async def _request(client: httpx.AsyncClient, key: str, path: str, values: list[int]) -> Any:
    items = [{"to": DEAD, "value": str(value)} for value in values]
    body = {"transactions": items} if path == BATCH else items[0]
    return await client.post(
        path, json=body, headers={"X-API-Key": key, "Idempotency-Key": f"dl-{len(values)}"}
    )


@pytest.mark.parametrize("path", [BATCH, DIRECT])
async def test_a_deadlock_victim_is_accepted_on_the_next_try_and_its_budget_taken_once(
    client: httpx.AsyncClient,
    runtime: Runtime,
    new_key: Any,
    monkeypatch: pytest.MonkeyPatch,
    path: str,
) -> None:
    key = await new_key("acme")
    admin = await new_key("ops", admin=True)
    changed = await client.patch(
        "/api/v1/admin/clients/acme", json={"dailyValueWei": "12"}, headers={"X-API-Key": admin}
    )
    assert changed.status_code == 200, changed.text
    values = [3, 3, 4] if path == BATCH else [10]
    tries = _deadlocking(monkeypatch, times=1)
    accepted = await _request(client, key, path, values)
    assert accepted.status_code == 202, accepted.text
    assert tries == [len(values), len(values)]
    assert await count_rows(runtime) == len(values)
    # The first try's reservation went with its rollback: 10 of the day's 12 wei are spent,
    # so 2 more are accepted and 3 are not.
    monkeypatch.undo()
    for value, status in (("2", 202), ("1", 403)):
        more = await client.post(
            DIRECT, json={"to": DEAD, "value": value}, headers={"X-API-Key": key}
        )
        assert more.status_code == status, more.text


async def test_a_request_deadlocked_on_every_try_answers_503_and_writes_nothing(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tries = _deadlocking(monkeypatch, times=3)
    refused = await _request(client, api_key, BATCH, [1, 2])
    assert refused.status_code == 503, refused.text
    assert len(tries) == 3
    assert await count_rows(runtime) == 0


@pytest.mark.parametrize(("code", "undone"), [(1213, [True]), (2013, [])])
async def test_a_commit_that_was_a_deadlocks_victim_gives_back_what_it_took_and_no_other_does(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch, code: int, undone: list[bool]
) -> None:
    # 1213: the server rolled it all back, so a budget lease's slice is given back; 2013 (the
    # connection lost during the commit): it may have been written, so nothing is undone.
    async def failing(uow: UnitOfWork) -> None:
        raise OperationalError("COMMIT", {}, asyncmy.errors.OperationalError(code, "failed"))

    monkeypatch.setattr(UnitOfWork, "commit", failing)
    given_back: list[bool] = []
    with pytest.raises(OperationalError):
        async with unit_of_work(runtime) as uow:
            uow.on_rollback.append(lambda: given_back.append(True))
    assert given_back == undone
