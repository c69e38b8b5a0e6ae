"""CI check: migrations reach head and match the models, on MariaDB/MySQL and on SQLite.

Runs ``alembic upgrade head`` then ``alembic check`` against a scratch MariaDB database
(TEST_DATABASE_URL, default mysql://root@127.0.0.1:3306) and a scratch SQLite file.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pymysql
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parent.parent
INI = ROOT / "libs" / "relay-core" / "alembic.ini"


def alembic(database_url: str, *args: str) -> None:
    env = dict(os.environ, DATABASE_URL=database_url)
    subprocess.run([sys.executable, "-m", "alembic", "-c", str(INI), *args], check=True, env=env)


def main() -> int:
    server = make_url(os.environ.get("TEST_DATABASE_URL", "mysql://root@127.0.0.1:3306"))
    name = f"relay_migrations_{uuid.uuid4().hex[:8]}"
    conn = pymysql.connect(
        host=server.host,
        port=server.port or 3306,
        user=server.username or "root",
        password=server.password or "",
    )
    try:
        with conn.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE `{name}`")
        mysql_url = server.set(database=name).render_as_string(hide_password=False)
        for database_url in (mysql_url, f"sqlite:///{tempfile.mkdtemp()}/relay.db"):
            print(
                f"== {make_url(database_url).get_backend_name()}: upgrade head, check", flush=True
            )
            alembic(database_url, "upgrade", "head")
            alembic(database_url, "check")
    finally:
        with conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
        conn.close()
    print("migrations: upgrade head + check passed on mysql and sqlite")
    return 0


if __name__ == "__main__":
    sys.exit(main())
