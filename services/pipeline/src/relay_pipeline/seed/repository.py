"""Bulk loads of generated rows: ``LOAD DATA LOCAL INFILE`` on MySQL, ``executemany`` on SQLite."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from relay_pipeline.database import Database
from relay_pipeline.seed.generator import EVENT_COLUMNS, TX_COLUMNS

NULL = "\\N"


def insert_clients(conn: Any, db: Database, clients: list[tuple[str, str, str, str]]) -> None:
    """``clients``: (id, name, key_hash, created_at) rows; existing ids are left alone."""
    ignore = "OR IGNORE" if db.dialect == "sqlite" else "IGNORE"
    mark = "?" if db.dialect == "sqlite" else "%s"
    sql = (
        f"INSERT {ignore} INTO api_clients (id, name, role, key_hash, key_prefix, created_at) "
        f"VALUES ({mark}, {mark}, 'client', {mark}, 'seed', {mark})"
    )
    cursor = conn.cursor()
    cursor.executemany(sql, clients)
    conn.commit()


def load_chunk(conn: Any, db: Database, tx_file: Path, event_file: Path) -> None:
    """Load one generated chunk (transactions, then their events) and commit."""
    if db.dialect == "mysql":
        _load_data(conn, "transactions", TX_COLUMNS, tx_file)
        _load_data(conn, "transaction_events", EVENT_COLUMNS, event_file)
    else:
        _executemany(conn, "transactions", TX_COLUMNS, tx_file)
        _executemany(conn, "transaction_events", EVENT_COLUMNS, event_file)
    conn.commit()


def prepare_bulk_session(conn: Any, db: Database) -> None:
    """Checks the generator already guarantees are skipped for the load's session only."""
    if db.dialect == "mysql":
        with conn.cursor() as cursor:
            cursor.execute("SET SESSION unique_checks = 0")
            cursor.execute("SET SESSION foreign_key_checks = 0")


def _load_data(conn: Any, table: str, columns: tuple[str, ...], path: Path) -> None:
    with conn.cursor() as cursor:
        cursor.execute(
            f"LOAD DATA LOCAL INFILE %s INTO TABLE {table} CHARACTER SET utf8mb4 "
            "FIELDS TERMINATED BY '\\t' ESCAPED BY '\\\\' LINES TERMINATED BY '\\n' "
            f"({', '.join(columns)})",
            (str(path),),
        )


def _executemany(conn: Any, table: str, columns: tuple[str, ...], path: Path) -> None:
    marks = ", ".join("?" for _ in columns)
    sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})"
    with path.open(encoding="utf-8") as lines:
        rows = ([None if v == NULL else v for v in line.rstrip("\n").split("\t")] for line in lines)
        conn.executemany(sql, rows)
