"""Migrations reach head and match the models, on MariaDB and SQLite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
