"""The ``relay`` command answers at once and finds a running ``make run``: parsing the command
line imports no command's dependencies, and what ``make run`` chose is taken only where the
environment says nothing, only while the ``make run`` that wrote it is running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from relay_api import devstate
from relay_api.cli import tx
from relay_client import models

HEAVY = (
    "relay_api.settings",
    "relay_api.app",
    "relay_core.db.engine",
    "relay_client",
    "eth_account",
    "sqlalchemy",
    "pydantic",
    "botocore",
    "redis",
    "httpx",
    "fastapi",
    "asyncio",
)


def test_the_help_imports_none_of_the_commands_dependencies() -> None:
    probe = (
        "import sys, contextlib, io\n"
        "from relay_api.cli import build_parser\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    build_parser().parse_args(['--help'])\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = set(done.stdout.split())
    assert not {name for name in HEAVY if name in loaded}


def test_the_tx_commands_choices_are_the_client_librarys() -> None:
    assert tx.SPEEDS == models.SPEEDS
    assert tx.STATUSES == models.STATUSES


def _process(*args: str) -> subprocess.Popen[str]:
    """A process with ``args`` on its command line, once it runs (not while it still execs)."""
    started = subprocess.Popen(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)", *args],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert started.stdout is not None
    assert started.stdout.readline().strip() == "up"
    return started


def _record(state: Path, pid: int, **env: str) -> None:
    state.mkdir(parents=True, exist_ok=True)
    (state / devstate.ENDPOINTS_FILE).write_text(json.dumps({"pid": pid, "env": env}))


def test_a_running_make_runs_endpoints_fill_what_the_environment_leaves_unset(
    tmp_path: Path,
) -> None:
    # A process whose command line reads as `relay dev` stands for make run.
    runner = _process("relay", "dev")
    try:
        _record(
            tmp_path,
            runner.pid,
            AWS_ENDPOINT_URL="http://127.0.0.1:4566",
            DATABASE_URL="sqlite:////tmp/x.db",
            RELAY_API_KEY="never-taken",  # not a shared name: ignored
        )
        environ = {"RELAY_STATE_DIR": str(tmp_path), "DATABASE_URL": "mysql://db/relay"}
        taken = devstate.adopt(environ)
        assert taken == {"AWS_ENDPOINT_URL": "http://127.0.0.1:4566"}
        assert environ["DATABASE_URL"] == "mysql://db/relay"  # the environment wins
        assert "RELAY_API_KEY" not in environ
    finally:
        runner.kill()
        runner.wait()


@pytest.mark.parametrize("case", ["gone", "another program", "unreadable"])
def test_endpoints_left_by_a_make_run_that_is_not_running_are_ignored(
    tmp_path: Path, case: str
) -> None:
    if case == "gone":
        ended = subprocess.Popen([sys.executable, "-c", "pass"])
        ended.wait()
        _record(tmp_path, ended.pid, AWS_ENDPOINT_URL="http://127.0.0.1:1")
    elif case == "another program":  # its process id since given to something else
        other = _process("dev")
        _record(tmp_path, other.pid, AWS_ENDPOINT_URL="http://127.0.0.1:1")
    else:
        tmp_path.joinpath(devstate.ENDPOINTS_FILE).write_text("{not json")
    environ = {"RELAY_STATE_DIR": str(tmp_path)}
    try:
        assert devstate.adopt(environ) == {}
    finally:
        if case == "another program":
            other.kill()
            other.wait()
    assert environ == {"RELAY_STATE_DIR": str(tmp_path)}


def test_make_runs_endpoints_are_written_without_secrets_and_removed(tmp_path: Path) -> None:
    environ = {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:4566",
        "RELAY_DEV_API_KEY": "rk_secret",
        "RELAY_EXECUTOR_API_KEY": "secret",
        "DATABASE_URL": "sqlite:////tmp/x.db",
    }
    path = devstate.write(tmp_path, environ)
    recorded = json.loads(path.read_text())
    assert recorded["pid"] == os.getpid()
    assert recorded["env"] == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:4566",
        "DATABASE_URL": "sqlite:////tmp/x.db",
    }
    assert path.stat().st_mode & 0o777 == 0o600
    devstate.remove(tmp_path)
    assert not path.exists()


def test_the_pool_is_shared_with_the_relay_command_unless_it_carries_keys(
    tmp_path: Path,
) -> None:
    """`relay relayers` beside `RELAY_DEV_RELAYERS=3 make run` lists the three relayers."""
    pool = {"RELAY_EXECUTOR_RELAYERS": "relayer-1,relayer-2,relayer-3"}
    recorded = json.loads(devstate.write(tmp_path, pool).read_text())
    assert recorded["env"] == pool
    keyed = {"RELAY_EXECUTOR_RELAYERS": '[{"id": "relayer-1", "apiKey": "secret"}]'}
    assert json.loads(devstate.write(tmp_path, keyed).read_text())["env"] == {}
