"""Database locations: SQLAlchemy URL → JDBC for Spark, and plain DB-API connections.

Spark reads through JDBC; the small amount of writing the pipeline does (the archive's
deletes, the seed's bulk loads) goes through DB-API drivers from the driver process.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pymysql
from sqlalchemy.engine import URL, make_url

Dialect = Literal["mysql", "sqlite"]

MARIADB_DRIVER = "org.mariadb.jdbc.Driver"
SQLITE_DRIVER = "org.sqlite.JDBC"


@dataclass(frozen=True)
class Database:
    """One relay database, as Spark (JDBC) and as Python (DB-API) reach it."""

    dialect: Dialect
    jdbc_url: str
    driver: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    host: str = "127.0.0.1"
    port: int = 3306
    name: str = ""
    path: str = ""

    def jdbc_properties(self, fetch_size: int) -> dict[str, str]:
        props = {"driver": self.driver, "fetchsize": str(fetch_size)}
        if self.user is not None:
            props["user"] = self.user
        if self.password is not None:
            props["password"] = self.password
        return props

    @property
    def display(self) -> str:
        """Where the data is, without credentials."""
        if self.dialect == "sqlite":
            return f"sqlite:{self.path}"
        return f"mysql://{self.host}:{self.port}/{self.name}"

    def sqlalchemy_url(self) -> URL:
        """A sync SQLAlchemy URL for this database (pymysql / sqlite3)."""
        if self.dialect == "sqlite":
            return URL.create("sqlite", database=self.path)
        return URL.create(
            "mysql+pymysql",
            username=self.user,
            password=self.password,
            host=self.host,
            port=self.port,
            database=self.name,
        )


def database_from_url(url: str) -> Database:
    """Convert a SQLAlchemy URL (``mysql://``, ``mariadb://``, ``mysql+driver://``,
    ``sqlite:///path``) into the JDBC location Spark reads.

    MySQL and MariaDB both go through the MariaDB driver with a ``jdbc:mysql://`` URL: with
    ``jdbc:mariadb://`` Spark does not apply its MySQL dialect and quotes identifiers with
    double quotes, which MariaDB reads as string literals.
    """
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend in {"mysql", "mariadb"}:
        if not parsed.database:
            raise ValueError("a mysql:// DATABASE_URL must name the database: mysql://user@host/db")
        host = parsed.host or "127.0.0.1"
        port = parsed.port or 3306
        return Database(
            dialect="mysql",
            jdbc_url=f"jdbc:mysql://{host}:{port}/{parsed.database}",
            driver=MARIADB_DRIVER,
            user=parsed.username or "root",
            password=parsed.password or "",
            host=host,
            port=port,
            name=parsed.database,
        )
    if backend == "sqlite":
        if not parsed.database or parsed.database == ":memory:":
            raise ValueError("the pipeline needs a SQLite file: sqlite:///path/to/relay.db")
        path = str(Path(parsed.database).expanduser().resolve())
        return Database(
            dialect="sqlite", jdbc_url=f"jdbc:sqlite:{path}", driver=SQLITE_DRIVER, path=path
        )
    raise ValueError(f"unsupported database {backend!r}: use mysql://… or sqlite:///…")


@contextmanager
def dbapi_connection(db: Database, *, local_infile: bool = False) -> Iterator[Any]:
    """A DB-API connection in manual-commit mode; closed on exit, never committed implicitly."""
    conn: Any
    if db.dialect == "sqlite":
        conn = sqlite3.connect(db.path, timeout=30)
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA busy_timeout=30000")
    else:
        conn = pymysql.connect(
            host=db.host,
            port=db.port,
            user=db.user or "root",
            password=db.password or "",
            database=db.name,
            autocommit=False,
            local_infile=local_infile,
            connect_timeout=10,
        )
    try:
        yield conn
    finally:
        conn.close()


def placeholder(db: Database) -> str:
    """The DB-API parameter marker of the database's driver."""
    return "?" if db.dialect == "sqlite" else "%s"


def upgrade_schema(database_url: str) -> None:
    """Bring the database to the latest Relay schema (the relay-core Alembic migrations)."""
    from alembic import command
    from alembic.config import Config

    from relay_core.settings import async_database_url

    config = Config()
    config.set_main_option("script_location", "relay_core:migrations")
    config.attributes["database_url"] = async_database_url(database_url)
    command.upgrade(config, "head")
