"""The ledger: one SQLite file (WAL, ``synchronous=NORMAL``) owned by one writer thread.

Every accepted send is committed before its 200 leaves (group commit: whatever queued up while
the previous batch was written goes in one transaction). Status changes are written behind,
coalesced per transaction. Reads go through the same thread, so a query sees every write that
was queued before it. A row is never deleted by retention, only marked purged: the ledger is
what tests count executions from.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from relayer_stub.ledger.schemas import LedgerQuery, LoadedLedger, Submission

log = logging.getLogger(__name__)

MAX_BATCH = 5000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS ledger (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    id          TEXT    NOT NULL UNIQUE,
    relayer_id  TEXT    NOT NULL,
    to_address  TEXT,
    to_lower    TEXT,
    data        TEXT    NOT NULL,
    value       TEXT    NOT NULL,
    received_at TEXT    NOT NULL,
    request     TEXT    NOT NULL,
    hung        INTEGER NOT NULL DEFAULT 0,
    status      TEXT    NOT NULL,
    nonce       INTEGER,
    state       TEXT,
    purged_at   TEXT
);
CREATE INDEX IF NOT EXISTS ledger_to ON ledger (to_lower);
CREATE INDEX IF NOT EXISTS ledger_live ON ledger (seq) WHERE purged_at IS NULL;
"""

_INSERT = (
    "INSERT INTO ledger (id, relayer_id, to_address, to_lower, data, value, received_at,"
    " request, hung, status, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_SAVE = "UPDATE ledger SET status = ?, nonce = ?, state = ? WHERE id = ?"
_PURGE = "UPDATE ledger SET purged_at = ?, state = NULL WHERE id = ? AND purged_at IS NULL"
_ENTRY_COLUMNS = (
    "seq, id, relayer_id, to_address, data, value, received_at, hung, status, nonce,"
    " purged_at, request"
)

Result = tuple["asyncio.Future[Any] | None", Any, BaseException | None]


class LedgerClosed(RuntimeError):
    pass


class Ledger:
    def __init__(self, path: str) -> None:
        self.path = path
        self._ops: queue.SimpleQueue[tuple[str, Any, asyncio.Future[Any] | None]] = (
            queue.SimpleQueue()
        )
        self._conn: sqlite3.Connection | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False

    # -- start-up and shutdown -------------------------------------------------------------

    def open(self) -> LoadedLedger:
        """Open (creating) the file and read back what a restart needs. Blocking: run it in a
        thread before :meth:`start`."""
        if self.path != ":memory:":
            Path(self.path).expanduser().parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=5000")
        conn.executescript(_SCHEMA)
        self._conn = conn
        loaded = LoadedLedger()
        for (state,) in conn.execute(
            "SELECT state FROM ledger WHERE purged_at IS NULL AND state IS NOT NULL ORDER BY seq"
        ):
            loaded.states.append(orjson.loads(state))
        for relayer_id, nonce in conn.execute(
            "SELECT relayer_id, MAX(nonce) FROM ledger WHERE nonce IS NOT NULL GROUP BY relayer_id"
        ):
            loaded.next_nonces[relayer_id] = int(nonce) + 1
        loaded.total = conn.execute("SELECT COUNT(*) FROM ledger").fetchone()[0]
        return loaded

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._conn is None:
            raise RuntimeError("Ledger.open() first")
        self._loop = loop
        self._thread = threading.Thread(target=self._run, name="ledger-writer", daemon=True)
        self._thread.start()

    async def close(self) -> None:
        """Write everything queued, then close the file."""
        if self._thread is None or self._closing:
            return
        self._closing = True
        done = self._submit("stop", None)
        await done
        await asyncio.to_thread(self._thread.join, 10)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._closing

    # -- API used from the event loop --------------------------------------------------------

    def record(self, submission: Submission) -> asyncio.Future[int]:
        """Queue one accepted send; the future resolves with its ``seq`` once committed."""
        return self._submit("insert", submission)

    def save(self, tx_id: str, status: str, nonce: int | None, state: bytes) -> None:
        """Write a transaction's new state behind (coalesced, not awaited)."""
        if not self._closing:
            self._ops.put(("save", (status, nonce, state, tx_id), None))

    def purge(self, tx_id: str, purged_at: str) -> None:
        if not self._closing:
            self._ops.put(("purge", (purged_at, tx_id), None))

    async def query(self, query: LedgerQuery) -> tuple[int, list[dict[str, Any]]]:
        result: tuple[int, list[dict[str, Any]]] = await self._submit("query", query)
        return result

    async def reset(self) -> None:
        await self._submit("reset", None)

    def _submit(self, kind: str, payload: Any) -> asyncio.Future[Any]:
        if self._closing and kind != "stop":
            raise LedgerClosed("the ledger is closed")
        if self._loop is None:
            raise LedgerClosed("the ledger is not started")
        future: asyncio.Future[Any] = self._loop.create_future()
        self._ops.put((kind, payload, future))
        return future

    # -- writer thread ----------------------------------------------------------------------

    def _run(self) -> None:
        assert self._conn is not None
        conn = self._conn
        while True:
            ops = [self._ops.get()]
            with contextlib.suppress(queue.Empty):
                while len(ops) < MAX_BATCH:
                    ops.append(self._ops.get_nowait())
            stop = next((future for kind, _, future in ops if kind == "stop"), None)
            try:
                results = self._apply(conn, ops)
            except Exception as exc:  # a bug, not a database error: fail the batch, keep going
                log.exception("stub.ledger.batch_failed", extra={"ops": len(ops)})
                results = [(future, None, exc) for _, _, future in ops if future is not stop]
            if stop is not None:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                conn.close()
                results.append((stop, None, None))
                self._settle(results)
                return
            self._settle(results)

    def _apply(
        self, conn: sqlite3.Connection, ops: list[tuple[str, Any, asyncio.Future[Any] | None]]
    ) -> list[Result]:
        """Writes go in one transaction per run between barriers (query, reset, stop)."""
        inserts: list[tuple[Submission, asyncio.Future[Any] | None]] = []
        saves: dict[str, tuple[str, int | None, bytes, str]] = {}
        purges: list[tuple[str, str]] = []
        results: list[Result] = []
        for kind, payload, future in ops:
            if kind == "insert":
                inserts.append((payload, future))
            elif kind == "save":
                saves[payload[3]] = payload
            elif kind == "purge":
                purges.append(payload)
            else:
                self._flush(conn, inserts, saves, purges, results)
                inserts, saves, purges = [], {}, []
                if kind == "stop":
                    break
                results.append(self._barrier(conn, kind, payload, future))
        self._flush(conn, inserts, saves, purges, results)
        return results

    def _flush(
        self,
        conn: sqlite3.Connection,
        inserts: list[tuple[Submission, asyncio.Future[Any] | None]],
        saves: dict[str, tuple[str, int | None, bytes, str]],
        purges: list[tuple[str, str]],
        results: list[Result],
    ) -> None:
        if not (inserts or saves or purges):
            return
        seqs: list[int] = []
        try:
            conn.execute("BEGIN")
            for submission, _ in inserts:
                cursor = conn.execute(
                    _INSERT,
                    (
                        submission.id,
                        submission.relayer_id,
                        submission.to,
                        submission.to.lower() if submission.to is not None else None,
                        submission.data,
                        str(submission.value),
                        submission.received_at,
                        submission.request.decode(),
                        int(submission.hung),
                        submission.status,
                        submission.state.decode(),
                    ),
                )
                seqs.append(int(cursor.lastrowid or 0))
            if saves:
                conn.executemany(
                    _SAVE, [(s, n, state.decode(), i) for s, n, state, i in saves.values()]
                )
            if purges:
                conn.executemany(_PURGE, purges)
            conn.execute("COMMIT")
        except Exception as exc:
            log.exception("stub.ledger.write_failed", extra={"inserts": len(inserts)})
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            results.extend((future, None, exc) for _, future in inserts)
            return
        results.extend((future, seq, None) for (_, future), seq in zip(inserts, seqs, strict=True))

    def _barrier(
        self,
        conn: sqlite3.Connection,
        kind: str,
        payload: Any,
        future: asyncio.Future[Any] | None,
    ) -> Result:
        try:
            if kind == "query":
                return (future, _query(conn, payload), None)
            if kind == "reset":
                conn.execute("BEGIN")
                conn.execute("DELETE FROM ledger")
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("DELETE FROM sqlite_sequence WHERE name = 'ledger'")
                conn.execute("COMMIT")
                return (future, None, None)
            raise ValueError(f"unknown ledger operation {kind!r}")
        except Exception as exc:
            with contextlib.suppress(sqlite3.Error):
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            return (future, None, exc)

    def _settle(self, results: list[Result]) -> None:
        if results and self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed under us
                self._loop.call_soon_threadsafe(_settle_all, results)


def _settle_all(results: list[Result]) -> None:
    for future, value, exc in results:
        if future is None or future.done():
            continue
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(value)


def _query(conn: sqlite3.Connection, query: LedgerQuery) -> tuple[int, list[dict[str, Any]]]:
    clauses: list[str] = []
    params: list[Any] = []
    filters: list[tuple[str, Any, Callable[[Any], Any]]] = [
        ("to_lower = ?", query.to, str.lower),
        ("data = ?", query.data, lambda v: v),
        ("relayer_id = ?", query.relayer_id, lambda v: v),
        ("status = ?", query.status, str.lower),
    ]
    for clause, value, convert in filters:
        if value is not None:
            clauses.append(clause)
            params.append(convert(value))
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    count = int(conn.execute(f"SELECT COUNT(*) FROM ledger{where}", params).fetchone()[0])  # noqa: S608
    rows = conn.execute(
        f"SELECT {_ENTRY_COLUMNS} FROM ledger{where} ORDER BY seq LIMIT ? OFFSET ?",  # noqa: S608
        [*params, query.limit, query.offset],
    ).fetchall()
    entries = [
        {
            "seq": seq,
            "id": tx_id,
            "relayer_id": relayer_id,
            "to": to,
            "data": data,
            "value": value,
            "received_at": received_at,
            "hung": bool(hung),
            "status": status,
            "nonce": nonce,
            "purged": purged_at is not None,
            "request": orjson.loads(request),
        }
        for (
            seq,
            tx_id,
            relayer_id,
            to,
            data,
            value,
            received_at,
            hung,
            status,
            nonce,
            purged_at,
            request,
        ) in rows
    ]
    return count, entries
