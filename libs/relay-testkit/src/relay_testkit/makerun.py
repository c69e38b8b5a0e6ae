"""`make run` as a user runs it, for the tests that drive it: started from a directory of the
test's own (all state in a temporary ``RELAY_STATE_DIR``), the banner read for what it chose
(the API, the key, SQS, the executor, the chain), and stopped with Ctrl-C (SIGINT to its
process group, as a terminal does), checking that every process of the tree is gone."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from relay_devstack.localsqs import free_port

ROOT = Path(__file__).resolve().parents[4]
STARTUP_S = 60.0  # make run installs nothing on a synced checkout; start-up is ~10 s here
# relay dev stops the API, then the consumer (draining, RELAY_CONSUMER_GRACE_S=20 in dev),
# then the executor and SQS; 30 s is devserver.GRACE_S, the longest it waits for any child.
STOP_GRACE_S = 30.0
# Settings that would point `make run` at something other than its embedded defaults.
INHERITED_OVERRIDES = ("DATABASE_URL", "REDIS_URL", "AWS_ENDPOINT_URL", "PORT", "MAKEFLAGS")


class MakeRunFailed(RuntimeError):
    """`make run` did not start, or did not stop within the grace period."""


@dataclass
class MakeRun:
    process: subprocess.Popen[bytes]
    log: Path
    port: int
    state_dir: Path
    seen: dict[int, str] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def banner(self, name: str) -> str:
        """The first word after ``name`` on its banner line (``API``, ``dev key``, ``SQS``,
        ``executor``, ``chain``...)."""
        match = re.search(rf"^\s+{re.escape(name)}\s+(\S+)", self.output(), re.MULTILINE)
        if match is None:
            raise MakeRunFailed(f"no {name!r} line in the banner:\n{self.output()[-3000:]}")
        return match.group(1)

    @property
    def key(self) -> str:
        return self.banner("dev key")

    @property
    def stub_admin(self) -> dict[str, str]:
        """Headers for the executor's /__admin (its token is kept in the state directory)."""
        token = (self.state_dir / "stub-admin-token").read_text().strip()
        return {"Authorization": f"Bearer {token}"}


def clean_env(state_dir: Path, port: int) -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("RELAY_", "STUB_", "MAKE", "MFLAGS"))
        and name not in INHERITED_OVERRIDES
    }
    env.update(RELAY_STATE_DIR=str(state_dir), PORT=str(port))
    return env


def start(
    workdir: Path,
    state_dir: Path,
    log: Path,
    extra_env: dict[str, str] | None = None,
    *,
    root: Path = ROOT,
    startup_s: float = STARTUP_S,
) -> MakeRun:
    port = free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["make", "--no-print-directory", "-C", str(root), "run"],
            cwd=workdir,
            env={**clean_env(state_dir, port), **(extra_env or {})},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, like a shell job
        )
    run = MakeRun(process=process, log=log, port=port, state_dir=state_dir)
    deadline = time.monotonic() + startup_s
    while "Relay is running" not in run.output() or "  curl -s " not in run.output():
        if process.poll() is not None or time.monotonic() > deadline:
            interrupt(run)
            raise MakeRunFailed(f"make run did not print its banner:\n{run.output()[-4000:]}")
        time.sleep(0.2)
    run.seen = descendants(process.pid)
    return run


def interrupt(run: MakeRun) -> float:
    """Ctrl-C: SIGINT to the foreground process group. Returns the seconds until every
    process of the tree (as last seen) had exited."""
    run.seen |= descendants(run.process.pid)
    started = time.monotonic()
    if run.process.poll() is None:
        os.killpg(run.process.pid, signal.SIGINT)
    deadline = started + STOP_GRACE_S
    while time.monotonic() < deadline:
        run.process.poll()
        if not any(_alive(pid) for pid in [run.process.pid, *run.seen]):
            return time.monotonic() - started
        time.sleep(0.1)
    left = {pid: cmd for pid, cmd in run.seen.items() if _alive(pid)}
    for pid in left:  # do not leak processes into the rest of the test session
        os.kill(pid, signal.SIGKILL)
    raise MakeRunFailed(f"still running {STOP_GRACE_S:.0f} s after Ctrl-C: {left}")


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def descendants(root: int) -> dict[int, str]:
    """Every live process below ``root``, including those in sessions of their own."""
    tree = _children()
    found: dict[int, str] = {}
    stack = [root]
    while stack:
        for child in tree.get(stack.pop(), []):
            found[child] = _cmdline(child)
            stack.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
