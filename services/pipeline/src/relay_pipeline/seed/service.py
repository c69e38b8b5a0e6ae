"""``relay-pipeline seed``: realistic synthetic history, generated in parallel, bulk loaded."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from relay_pipeline.database import Database, dbapi_connection
from relay_pipeline.seed import repository
from relay_pipeline.seed.generator import Clock, SeedPlan, generate_chunk, uuid7

CHUNK = 100_000


@dataclass(frozen=True)
class SeedResult:
    transactions: int
    events: int
    seconds: float


def client_ids(count: int, seed: int) -> tuple[str, ...]:
    import random

    rng = random.Random(seed)
    return tuple(uuid7(1_700_000_000_000 + k, rng) for k in range(count))


def seed_history(
    db: Database,
    *,
    rows: int,
    start: datetime,
    end: datetime,
    clients: int = 12,
    seed: int = 1,
    anomaly_rate: float = 0.0005,
    workers: int | None = None,
    report: Callable[[str], None] = lambda _line: None,
) -> SeedResult:
    """Write ``rows`` transactions created between ``start`` and ``end`` (naive UTC), with events.

    The schema must exist (``relay db upgrade`` or ``--create-schema``).
    """
    began = time.monotonic()
    plan = SeedPlan(
        rows=rows,
        start_us=_epoch_us(start),
        end_us=_epoch_us(end),
        client_ids=client_ids(clients, seed),
        seed=seed,
        anomaly_rate=anomaly_rate,
    )
    events = 0
    with (
        tempfile.TemporaryDirectory(prefix="relay-seed-") as tmp,
        dbapi_connection(db, local_infile=True) as conn,
    ):
        created = Clock()(plan.start_us)
        repository.insert_clients(
            conn,
            db,
            [
                (cid, f"seed-client-{k}", hashlib.sha256(cid.encode()).hexdigest(), created)
                for k, cid in enumerate(plan.client_ids)
            ],
        )
        repository.prepare_bulk_session(conn, db)
        for done, (tx_file, ev_file, n_events) in enumerate(_chunks(plan, Path(tmp), workers), 1):
            repository.load_chunk(conn, db, tx_file, ev_file)
            tx_file.unlink()
            ev_file.unlink()
            events += n_events
            loaded = min(done * CHUNK, rows)
            report(f"seed: {loaded:,}/{rows:,} transactions, {events:,} events")
    return SeedResult(transactions=rows, events=events, seconds=time.monotonic() - began)


def _write_chunk(args: tuple[SeedPlan, int, int, str]) -> tuple[Path, Path, int]:
    plan, first, count, directory = args
    tx_lines, ev_lines = generate_chunk(plan, first, count)
    tx_file = Path(directory) / f"tx-{first:012d}.tsv"
    ev_file = Path(directory) / f"ev-{first:012d}.tsv"
    tx_file.write_text("\n".join(tx_lines) + "\n", encoding="utf-8")
    ev_file.write_text("\n".join(ev_lines) + ("\n" if ev_lines else ""), encoding="utf-8")
    return tx_file, ev_file, len(ev_lines)


def _chunks(
    plan: SeedPlan, directory: Path, workers: int | None
) -> Iterator[tuple[Path, Path, int]]:
    jobs = [
        (plan, first, min(CHUNK, plan.rows - first), str(directory))
        for first in range(0, plan.rows, CHUNK)
    ]
    if len(jobs) <= 1:
        yield from map(_write_chunk, jobs)
        return
    processes = workers or max(1, (os.cpu_count() or 2))
    # Generation runs ahead of the load in worker processes; chunks are loaded in order so
    # ids, timestamps and event ids all grow together.
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        yield from pool.imap(_write_chunk, jobs)


def _epoch_us(moment: datetime) -> int:
    return (moment - datetime(1970, 1, 1)) // timedelta(microseconds=1)
