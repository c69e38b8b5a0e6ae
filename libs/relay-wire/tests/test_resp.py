"""relay_wire.resp against the real Redis: pipelined answers matched in order, Redis's errors as
redis-py's exceptions (nested ones too), and a connection that breaks, goes silent or is told
it is on a replica replaced by the next command."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import redis
from redis.exceptions import (
    AuthenticationError,
    BusyLoadingError,
    MasterDownError,
    NoScriptError,
    ReadOnlyError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from relay_core.cache import connect
from relay_devstack.localsqs import free_port
from relay_wire.resp import RespClient

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
    # The test Redis has no password: AUTH is refused, which shows it was sent; redis-py
    # names that refusal (WRONGPASS) AuthenticationError.
    client = RespClient("redis://someone:secret@127.0.0.1:6379/0", 1.0)
    with pytest.raises(AuthenticationError):
        await client.get("x")
    await client.aclose()


async def test_an_error_inside_an_array_answer_fails_its_command_as_redis_py_names_it(
    client: RespClient, key: str
) -> None:
    await client.execute("SET", key, "not a number", "EX", 60)
    # A script that caught an error (redis.pcall) and returned it among its values...
    sha = await client.script_load("return {1, redis.pcall('INCR', KEYS[1]), 3}")
    with pytest.raises(ResponseError, match="not an integer"):
        await client.evalsha(sha, 1, key)
    # ...and a transaction one of whose commands failed: its EXEC answers an array.
    assert await client.execute("MULTI") == b"OK"
    assert await client.execute("SET", f"{key}:other", "1", "EX", 60) == b"QUEUED"
    assert await client.execute("INCR", key) == b"QUEUED"
    with pytest.raises(ResponseError, match="not an integer"):
        await client.execute("EXEC")
    # Nested deeper, and of a type redis-py names: still the same exception.
    sha = await client.script_load("return {2, {redis.error_reply('NOSCRIPT nested')}}")
    with pytest.raises(NoScriptError, match="nested"):
        await client.evalsha(sha, 0)
    # The answers after them are still matched to their commands.
    assert await client.get(f"{key}:other") == b"1"
    assert client.connects == 1


@pytest.fixture
def private_redis() -> Iterator[tuple[str, redis.Redis]]:
    """A Redis server of this test's own (the test makes it a replica), and an admin client."""
    port = free_port()
    process = subprocess.Popen(
        ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", ""],
        stdout=subprocess.DEVNULL,
    )
    admin = redis.Redis(host="127.0.0.1", port=port)
    for _ in range(100):
        try:
            admin.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    try:
        yield f"redis://127.0.0.1:{port}/0", admin
    finally:
        admin.close()
        process.kill()
        process.wait()


def _clients(admin: redis.Redis) -> int:
    return len(admin.client_list()) - 1  # (less the admin's own)


@pytest.mark.parametrize(
    ("command", "stale_data", "error"),
    [
        (("SET", "k", "v"), "yes", ReadOnlyError),  # a write, on a primary turned replica
        (("GET", "k"), "no", MasterDownError),  # a read, on a replica that lost its primary
    ],
)
async def test_a_failover_error_makes_the_next_command_connect_anew(
    private_redis: tuple[str, redis.Redis],
    command: tuple[str, ...],
    stale_data: str,
    error: type[Exception],
) -> None:
    url, admin = private_redis
    client = RespClient(url, 1.0)
    try:
        assert await client.execute("SET", "k", "v") == b"OK"
        # A failover: this server is now a replica (of a primary that is not there)...
        admin.config_set("replica-serve-stale-data", stale_data)
        admin.replicaof("127.0.0.1", free_port())
        with pytest.raises(error):
            await client.execute(*command)
        # ...and the name is the new primary's (here the same server, promoted back): the
        # next command goes to a new connection, not on down the old one.
        admin.replicaof("NO", "ONE")
        assert await client.execute("SET", "k", "w") == b"OK"
        assert client.connects == 2
        await asyncio.sleep(0.05)
        assert _clients(admin) == 1  # the old one closed
    finally:
        await client.aclose()


class _Scripted(asyncio.Protocol):
    """A server whose first connection answers each command with ``first`` (0.05 s late, so
    that commands pipeline), and every later one with OK; ``open``: its connections open."""

    def __init__(self, first: list[bytes], open_: list[asyncio.Transport], made: list[int]):
        self.first, self.open, self.made = first, open_, made

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.made.append(1)
        self.answers = list(self.first) if len(self.made) == 1 else []
        self.open.append(self.transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.open.remove(self.transport)

    def data_received(self, data: bytes) -> None:
        for _ in range(data.count(b"*")):
            answer = self.answers.pop(0) if self.answers else b"+OK\r\n"
            asyncio.get_running_loop().call_later(0.05, self.transport.write, answer)


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (b"-READONLY You can't write against a read only replica.", ReadOnlyError),
        (b"-LOADING Redis is loading the dataset in memory", BusyLoadingError),
        (b"-MASTERDOWN Link with MASTER is down", MasterDownError),
        (b"-ERR max number of clients reached", RedisConnectionError),
    ],
)
async def test_a_server_that_cannot_serve_retires_the_connection_after_its_answers(
    reply: bytes, error: type[Exception]
) -> None:
    open_: list[asyncio.Transport] = []
    made: list[int] = []
    first = [b"+OK\r\n", reply + b"\r\n", b"$5\r\nafter\r\n"]
    server = await asyncio.get_running_loop().create_server(
        lambda: _Scripted(first, open_, made), "127.0.0.1", 0
    )
    port = server.sockets[0].getsockname()[1]
    client = RespClient(f"redis://127.0.0.1:{port}/0", 1.0)
    try:
        assert await client.execute("PING") == b"OK"
        # Two commands on their way at once: the error fails its own, the answer already
        # coming behind it still reaches its command...
        failing = asyncio.create_task(client.execute("SET", "k", "v"))
        behind = asyncio.create_task(client.get("k"))
        with pytest.raises(error):
            await failing
        assert await behind == b"after"
        # ...and then that connection is closed, and the next command opens another.
        assert await client.execute("PING") == b"OK"
        assert (len(made), len(open_)) == (2, 1)
    finally:
        await client.aclose()
        server.close()


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
