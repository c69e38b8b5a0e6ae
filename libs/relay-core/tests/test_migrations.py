"""Migrations reach head and match the models, on MariaDB and SQLite."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from alembic import command
from alembic.config import Config

ROOT = Path(__file__).resolve().parents[3]


def test_alembic_upgrade_head_then_check_passes_on_mariadb_and_sqlite() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "check_migrations.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "passed on mysql and sqlite" in result.stdout


def test_the_upgrade_to_deny_by_default_cuts_no_existing_client_off(tmp_path: Path) -> None:
    """Migration 0009: every client that existed keeps the policy it had in effect (none, or
    its limits), granted by the upgrade; one made after it starts with none."""
    path = tmp_path / "relay.db"
    config = Config()
    config.set_main_option("script_location", "relay_core:migrations")
    config.attributes["database_url"] = f"sqlite+aiosqlite:///{path}"
    command.upgrade(config, "0008")
    with sqlite3.connect(path) as db:
        for name, max_value in (("old-unlimited", None), ("old-capped", "100")):
            db.execute(
                "INSERT INTO api_clients (id, name, role, key_hash, key_prefix, created_at, "
                "policy_max_value_wei, policy_gasless_value, policy_spend_lock) "
                "VALUES (?, ?, 'client', ?, 'rk_x', '2026-11-01 00:00:00', ?, 0, 0)",
                (name, name, name * 4, max_value),
            )
    command.upgrade(config, "head")
    with sqlite3.connect(path) as db:
        granted = dict(db.execute("SELECT name, policy_granted_at FROM api_clients").fetchall())
        capped = db.execute(
            "SELECT policy_max_value_wei FROM api_clients WHERE name = 'old-capped'"
        ).fetchone()
    assert all(granted.values()), granted
    assert capped == ("100",)
