"""Every command the packages install answers --help with its usage and exits 0, without
starting anything (a server that started would not return within the timeout) or needing any
configuration."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted(
    name
    for pyproject in [*ROOT.glob("services/*/pyproject.toml"), *ROOT.glob("libs/*/pyproject.toml")]
    for name in tomllib.loads(pyproject.read_text()).get("project", {}).get("scripts", {})
)


def test_the_entry_points_are_the_documented_ones() -> None:
    assert SCRIPTS == ["queue-consumer", "relay", "relay-api", "relay-pipeline", "relayer-stub"]


CASES = [[script] for script in SCRIPTS] + [
    ["relay", *subcommand] for subcommand in (["tx"], ["tx", "submit"], ["serve"], ["dev"])
]


@pytest.mark.parametrize("command", CASES, ids=" ".join)
def test_every_entry_point_answers_help_without_starting(command: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RELAY_", "STUB_"))}
    env.update(DATABASE_URL="mysql://nobody@127.0.0.1:1/none", PORT="1")  # nothing to reach
    done = subprocess.run(
        [str(Path(sys.executable).parent / command[0]), *command[1:], "--help"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: "), done.stdout
