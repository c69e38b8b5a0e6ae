"""Per-client API keys: hashed at rest, checked on every route, scoped to their owner."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
import uuid

import httpx
import pytest
from api_testkit import DEAD
from sqlalchemy import event, select

from relay_api.auth import repository
from relay_api.auth.service import Authenticator
from relay_api.runtime import Runtime
from relay_core.db.models import ApiClient
from relay_core.errors import Unauthorized

DIRECT = "/api/v1/relay/direct"


async def test_missing_unknown_and_revoked_keys_get_401(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    body = {"to": DEAD}
    missing = await client.post(DIRECT, json=body)
    assert missing.status_code == 401
    assert missing.json() == {"error": "unauthorized", "detail": "missing X-API-Key header"}
    wrong = await client.post(DIRECT, json=body, headers={"X-API-Key": api_key + "x"})
    assert wrong.status_code == 401
    ok = await client.post(DIRECT, json=body, headers={"X-API-Key": api_key})
    assert ok.status_code == 202
    status_path = f"/api/v1/relay/status/{ok.json()['transactionId']}"
    assert (await client.get(status_path)).status_code == 401

    async with runtime.sessions() as session, session.begin():
        client_row = await repository.active_by_hash(
            session, hashlib.sha256(api_key.encode()).hexdigest()
        )
        assert client_row is not None
        assert await repository.revoke(session, client_row.id)
    revoked = await client.post(DIRECT, json=body, headers={"X-API-Key": api_key})
    assert revoked.status_code == 401
    assert (await client.get(status_path, headers={"X-API-Key": api_key})).status_code == 401


async def test_another_clients_transaction_is_404_but_an_admin_may_read_it(
    client: httpx.AsyncClient, new_key: object
) -> None:
    owner = await new_key("owner")  # type: ignore[operator]
    other = await new_key("other")  # type: ignore[operator]
    admin = await new_key("ops", admin=True)  # type: ignore[operator]
    accepted = await client.post(DIRECT, json={"to": DEAD}, headers={"X-API-Key": owner})
    path = f"/api/v1/relay/status/{accepted.json()['transactionId']}"
    for _ in range(2):  # once from MySQL, once from the Redis entry the first read left
        foreign = await client.get(path, headers={"X-API-Key": other})
        assert foreign.status_code == 404
        assert foreign.json()["error"] == "not_found"
        assert (await client.get(path, headers={"X-API-Key": owner})).status_code == 200
    assert (await client.get(path, headers={"X-API-Key": admin})).status_code == 200


async def test_keys_are_not_stored_in_plain_text(runtime: Runtime, api_key: str) -> None:
    async with runtime.sessions() as session:
        rows = (await session.execute(select(ApiClient))).scalars().all()
    assert len(rows) == 1
    stored = " ".join(str(value) for value in vars(rows[0]).values())
    assert api_key not in stored
    assert api_key[12:] not in stored
    assert rows[0].key_hash == hashlib.sha256(api_key.encode()).hexdigest()


async def test_cli_keys_create_prints_a_working_key_alone_on_the_last_line(
    client: httpx.AsyncClient, database_url: str
) -> None:
    name = f"cli-{uuid.uuid4().hex[:6]}"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "relay_api.cli",
            "keys",
            "create",
            "--name",
            name,
            "--any-destination",
        ],
        env={**os.environ, "DATABASE_URL": database_url},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    key = result.stdout.strip().splitlines()[-1]
    assert key.startswith("rk_")
    assert " " not in key
    accepted = await client.post(DIRECT, json={"to": DEAD}, headers={"X-API-Key": key})
    assert accepted.status_code == 202


async def test_requests_arriving_together_with_an_uncached_key_share_one_lookup(
    runtime: Runtime, api_key: str
) -> None:
    authenticator = Authenticator(runtime.sessions, ttl_s=5)
    reads = 0

    def count(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        nonlocal reads
        reads += "FROM api_clients" in statement

    event.listen(runtime.engine.sync_engine, "before_cursor_execute", count)
    try:
        callers = await asyncio.gather(*(authenticator.authenticate(api_key) for _ in range(20)))
        bad = await asyncio.gather(
            *(authenticator.authenticate(api_key + "x") for _ in range(5)), return_exceptions=True
        )
    finally:
        event.remove(runtime.engine.sync_engine, "before_cursor_execute", count)
    assert reads == 2  # one per key, not one per request
    assert len({caller.id for caller in callers}) == 1
    assert all(isinstance(result, Unauthorized) for result in bad)


async def test_a_key_in_use_is_verified_again_before_it_expires_and_revocation_lands(
    runtime: Runtime, api_key: str
) -> None:
    now = [1000.0]
    authenticator = Authenticator(runtime.sessions, ttl_s=10.0, clock=lambda: now[0])
    caller = await authenticator.authenticate(api_key)
    async with runtime.sessions() as session, session.begin():
        assert await repository.revoke(session, caller.id)
    now[0] += 7.0  # not yet in the last fifth: trusted, nothing read
    assert (await authenticator.authenticate(api_key)).id == caller.id
    now[0] += 1.5  # in the last fifth: still trusted, and this use starts the check ...
    assert (await authenticator.authenticate(api_key)).id == caller.id
    for _ in range(100):  # ... which runs in the background
        await asyncio.sleep(0.02)
        if not authenticator._lookups:
            break
    # The check found the key revoked: refused although the entry had 1.5 s left.
    with pytest.raises(Unauthorized):
        await authenticator.authenticate(api_key)
