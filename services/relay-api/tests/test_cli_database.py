"""The relay command and its database, as an operator meets it: without DATABASE_URL it uses
the file `make run` keeps (.relay/relay.db, its directory made), a database without its schema
says to run `relay db upgrade`, and one out of reach says so with exit code 5; no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from relay_api.exitcodes import EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE


def _relay(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    clean.pop("DATABASE_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "relay_api.cli", *args],
        cwd=cwd,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_without_database_url_it_uses_make_runs_database(tmp_path: Path) -> None:
    fresh = _relay(tmp_path, "keys", "list")
    assert fresh.returncode == EXIT_USAGE
    assert "no schema yet: run `relay db upgrade` first" in fresh.stderr
    assert "Traceback" not in fresh.stderr
    assert _relay(tmp_path, "db", "upgrade").returncode == EXIT_OK
    assert (tmp_path / ".relay" / "relay.db").is_file()
    created = _relay(tmp_path, "keys", "create", "--name", "acme")
    assert created.returncode == EXIT_OK, created.stderr
    assert "acme" in _relay(tmp_path, "keys", "list").stdout


def test_a_database_out_of_reach_is_exit_5_with_a_plain_message(tmp_path: Path) -> None:
    done = _relay(tmp_path, "keys", "list", DATABASE_URL="mysql://nobody:secret@127.0.0.1:1/x")
    assert done.returncode == EXIT_UNREACHABLE
    assert "cannot use the database at mysql://nobody:***@127.0.0.1:1/x" in done.stderr
    assert "secret" not in done.stderr
    assert "Traceback" not in done.stderr
