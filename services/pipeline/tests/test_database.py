"""--database-url takes SQLAlchemy URLs and turns them into what Spark's JDBC reader needs."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay_pipeline.database import MARIADB_DRIVER, SQLITE_DRIVER, database_from_url


@pytest.mark.parametrize(
    "url",
    [
        "mysql://relay:s3cret@db.internal:3307/relay",
        "mariadb://relay:s3cret@db.internal:3307/relay",
        "mysql+asyncmy://relay:s3cret@db.internal:3307/relay",
        "mysql+pymysql://relay:s3cret@db.internal:3307/relay?charset=utf8mb4",
    ],
)
def test_mysql_urls_become_jdbc_mysql_with_the_mariadb_driver(url):
    db = database_from_url(url)
    # jdbc:mysql, not jdbc:mariadb: only the former gets Spark's MySQL dialect (backtick quoting).
    assert db.jdbc_url == "jdbc:mysql://db.internal:3307/relay"
    props = db.jdbc_properties(500)
    assert props == {
        "driver": MARIADB_DRIVER,
        "fetchsize": "500",
        "user": "relay",
        "password": "s3cret",
    }
    assert "s3cret" not in db.display
    assert "s3cret" not in repr(db)


def test_mysql_url_defaults_port_and_user():
    db = database_from_url("mysql://127.0.0.1/relay")
    assert (db.jdbc_url, db.user, db.password) == ("jdbc:mysql://127.0.0.1:3306/relay", "root", "")


def test_sqlite_url_becomes_an_absolute_jdbc_sqlite_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    db = database_from_url("sqlite:///./relay.db")
    assert db.jdbc_url == f"jdbc:sqlite:{Path(tmp_path, 'relay.db').resolve()}"
    assert db.jdbc_properties(10) == {"driver": SQLITE_DRIVER, "fetchsize": "10"}


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://root@127.0.0.1:3306", "must name the database"),
        ("sqlite://", "needs a SQLite file"),
        ("sqlite:///:memory:", "needs a SQLite file"),
        ("postgresql://u@h/db", "unsupported database"),
    ],
)
def test_unusable_urls_are_refused_with_a_reason(url, message):
    with pytest.raises(ValueError, match=message):
        database_from_url(url)
