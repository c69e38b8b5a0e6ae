"""relay_core.resp against the real Redis: pipelined answers matched in order, Redis's errors as
redis-py's exceptions, and a connection that breaks or goes silent replaced by the next
command."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from relay_core.cache import connect
from relay_core.resp import RespClient

URL = "redis://127.0.0.1:6379/0"


@pytest.fixture
async def client() -> AsyncIterator[RespClient]:
    made = RespClient(URL, 1.0)
    yield made
    await made.aclose()


@pytest.fixture
def key() -> str:
    return f"relaytest:{uuid.uuid4().hex}"


async def test_concurrent_commands_share_one_connection_and_get_their_own_answers(
    client: RespClient, key: str
) -> None:
    values = [f"v{i}-é".encode() for i in range(50)]

    async def set_then_get(i: int) -> bytes | None:
        await client.execute("SET", f"{key}:{i}", values[i], "EX", 60)
        return await client.get(f"{key}:{i}")

    assert await asyncio.gather(*(set_then_get(i) for i in range(50))) == values
    assert await client.get(f"{key}:missing") is None
    assert await client.execute("DEL", *(f"{key}:{i}" for i in range(50))) == 50
    assert client.connects == 1


async def test_scripts_and_their_errors_come_back_as_redis_py_reports_them(
    client: RespClient, key: str
) -> None:
    script = "return {KEYS[1], tonumber(ARGV[1]) + 1, {ARGV[2]}}"
    sha = await client.script_load(script)
    assert await client.evalsha(sha, 1, key, 41, "x") == [key.encode(), 42, [b"x"]]
    with pytest.raises(NoScriptError):
        await client.evalsha("0" * 40, 0)
    with pytest.raises(ResponseError, match="unknown command"):
        await client.execute("NOSUCHCOMMAND")
    assert await client.execute("PING") == b"PONG"  # still in step after the errors
    assert client.connects == 1


async def test_a_database_in_the_url_is_selected(key: str) -> None:
    other = RespClient("redis://127.0.0.1:6379/3", 1.0)
    plain = connect("redis://127.0.0.1:6379/3", 1.0)
    try:
        await other.execute("SET", key, "in-3", "EX", 60)
        assert await plain.get(key) == b"in-3"
    finally:
        await plain.delete(key)
        await plain.aclose()
        await other.aclose()


async def test_a_connection_the_server_drops_fails_what_waits_and_the_next_command_reconnects(
    client: RespClient, key: str
) -> None:
    own_id = await client.execute("CLIENT", "ID")
    admin = connect(URL, 1.0)
    try:
        # BLPOP holds its answer; the connection is killed under it.
        waiting = asyncio.create_task(client.execute("BLPOP", key, 5))
        await asyncio.sleep(0.1)
        await admin.execute_command("CLIENT", "KILL", "ID", own_id)
        with pytest.raises(RedisConnectionError):
            await waiting
    finally:
        await admin.aclose()
    assert await client.execute("PING") == b"PONG"
    assert client.connects == 2


async def test_no_answer_in_time_is_a_timeout_and_the_connection_is_replaced(key: str) -> None:
    client = RespClient(URL, 0.2)
    try:
        with pytest.raises(RedisTimeoutError):
            await client.execute("BLPOP", key, 2)  # answers in 2 s: out of step after 0.2
        assert await client.execute("PING") == b"PONG"
        assert client.connects == 2
    finally:
        await client.aclose()


async def test_nothing_listening_is_a_connection_error() -> None:
    client = RespClient("redis://127.0.0.1:1/0", 0.5)
    with pytest.raises(RedisConnectionError):
        await client.get("x")


async def test_a_password_is_sent_and_a_refusal_surfaces() -> None:
    # The test Redis has no password: AUTH is refused, which shows it was sent.
    client = RespClient("redis://someone:secret@127.0.0.1:6379/0", 1.0)
    with pytest.raises(ResponseError):
        await client.get("x")
    await client.aclose()


class _FakeRedis:
    """A server that answers OK to every command, ``delay_s`` late, and not at all on its
    first connection when ``silent_first``; it counts the connections made and still open."""

    def __init__(self, *, delay_s: float = 0.0, silent_first: bool = False) -> None:
        self.delay_s, self.silent_first = delay_s, silent_first
        self.made = 0
        self.open: list[asyncio.Transport] = []

    async def start(self) -> tuple[asyncio.Server, int]:
        server = await asyncio.get_running_loop().create_server(
            lambda: _FakeConnection(self), "127.0.0.1", 0
        )
        return server, server.sockets[0].getsockname()[1]


class _FakeConnection(asyncio.Protocol):
    def __init__(self, owner: _FakeRedis) -> None:
        self.owner = owner

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.owner.made += 1
        self.silent = self.owner.silent_first and self.owner.made == 1
        self.owner.open.append(self.transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner.open.remove(self.transport)

    def data_received(self, data: bytes) -> None:
        if not self.silent:
            answer = b"+OK\r\n" * data.count(b"*")
            asyncio.get_running_loop().call_later(self.owner.delay_s, self.transport.write, answer)


async def test_a_connect_every_caller_left_does_not_answer_for_the_next() -> None:
    fake = _FakeRedis(silent_first=True)
    server, port = await fake.start()
    client = RespClient(f"redis://:pw@127.0.0.1:{port}/0", 0.2)
    try:
        left = asyncio.create_task(client.execute("PING"))
        await asyncio.sleep(0.05)
        left.cancel()  # its caller gave up while AUTH went unanswered...
        await asyncio.sleep(0.3)  # ...and that connect timed out with nobody waiting
        # The next command connects again rather than inherit the old timeout.
        assert await client.execute("PING") == b"OK"
        assert fake.made == 2
    finally:
        await client.aclose()
        server.close()


async def test_a_connection_made_as_the_client_closes_is_not_kept() -> None:
    fake = _FakeRedis(delay_s=0.1)
    server, port = await fake.start()
    client = RespClient(f"redis://:pw@127.0.0.1:{port}/0", 1.0)
    try:
        command = asyncio.create_task(client.execute("PING"))
        await asyncio.sleep(0.03)  # connected, AUTH not yet answered
        await client.aclose()
        with pytest.raises(RedisConnectionError, match="closed"):
            await command
        await asyncio.sleep(0.05)
        assert fake.made == 1
        assert fake.open == []
    finally:
        server.close()
