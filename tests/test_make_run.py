"""`make run` as a user runs it: a real process tree on a fresh state directory.

Starts `make run` from a temporary working directory (the Makefile is found with `make -C`,
all state goes to a temporary RELAY_STATE_DIR), submits the banner's transaction over HTTP,
waits until it is `confirmed` with a hash the local chain has a receipt for, runs
examples/gasless.py as a user would (no arguments) until it prints `confirmed`, then presses
"Ctrl-C" (SIGINT to the foreground process group, as a terminal does) and checks that every
process of the tree is gone within the grace period. A second `make run` on the same
directory must find the same database and the same chain: the first transaction is still
there and still on chain.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import botocore.session
import httpx
import pytest

from relay_core.localsqs import free_port

ROOT = Path(__file__).resolve().parent.parent
STARTUP_S = 60.0  # make run installs nothing on a synced checkout; start-up is ~10 s here
CONFIRMED_S = 30.0  # a block a second, confirmed two blocks later
# relay dev stops the API, then the consumer (draining, RELAY_CONSUMER_GRACE_S=20 in dev),
# then the executor and SQS; 30 s is devserver.GRACE_S, the longest it waits for any child.
STOP_GRACE_S = 30.0
# Settings that would point `make run` at something other than its embedded defaults.
INHERITED_OVERRIDES = ("DATABASE_URL", "REDIS_URL", "AWS_ENDPOINT_URL", "PORT", "MAKEFLAGS")


@dataclass
class MakeRun:
    process: subprocess.Popen[bytes]
    log: Path
    port: int
    seen: dict[int, str] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def _clean_env(state_dir: Path, port: int) -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("RELAY_", "STUB_", "MAKE", "MFLAGS"))
        and name not in INHERITED_OVERRIDES
    }
    env.update(RELAY_STATE_DIR=str(state_dir), PORT=str(port))
    return env


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


def _descendants(root: int) -> dict[int, str]:
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


def _start(
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
            env={**_clean_env(state_dir, port), **(extra_env or {})},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, like a shell job
        )
    run = MakeRun(process=process, log=log, port=port)
    deadline = time.monotonic() + startup_s
    while "Relay is running" not in run.output() or "  curl -s " not in run.output():
        if process.poll() is not None or time.monotonic() > deadline:
            _interrupt(run)
            pytest.fail(f"make run did not print its banner:\n{run.output()[-4000:]}")
        time.sleep(0.2)
    run.seen = _descendants(process.pid)
    return run


def _interrupt(run: MakeRun) -> float:
    """Ctrl-C: SIGINT to the foreground process group. Returns the seconds until every
    process of the tree (as last seen) had exited."""
    run.seen |= _descendants(run.process.pid)
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
    pytest.fail(f"still running {STOP_GRACE_S:.0f} s after Ctrl-C: {left}")


def _banner_key(output: str) -> str:
    match = re.search(r"^\s+dev key\s+(\S+)\s*$", output, re.MULTILINE)
    assert match, output
    return match.group(1)


def _chain_rpc(banner: str) -> str:
    match = re.search(r"^\s+chain\s+(http://127\.0\.0\.1:\d+)\s", banner, re.MULTILINE)
    assert match, banner
    return match.group(1)


def _receipt(rpc_url: str, tx_hash: str) -> dict[str, object] | None:
    answer = httpx.post(
        rpc_url,
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "eth_getTransactionReceipt",
            "params": [tx_hash],
        },
        timeout=10,
    ).json()
    result = answer.get("result")
    return result if isinstance(result, dict) else None


def _final_status(run: MakeRun, transaction_id: str, headers: dict[str, str]) -> dict[str, Any]:
    """The transaction's status once final (or as it is after CONFIRMED_S)."""
    status: dict[str, Any] = {}
    deadline = time.monotonic() + CONFIRMED_S
    while time.monotonic() < deadline:
        status = httpx.get(
            f"{run.base}/api/v1/relay/status/{transaction_id}", headers=headers, timeout=10
        ).json()
        if status.get("status") in ("confirmed", "failed"):
            break
        time.sleep(0.2)
    return status


def _redrive_target(banner: str) -> str:
    """The DLQ the local SQS server's work queue redrives to (SQS must be on loopback)."""
    match = re.search(r"^\s+SQS\s+(http://127\.0\.0\.1:\d+)\s", banner, re.MULTILINE)
    assert match, banner
    sqs = botocore.session.get_session().create_client(
        "sqs",
        endpoint_url=match.group(1),
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    url = sqs.get_queue_url(QueueName="relay-transactions")["QueueUrl"]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])
    return str(json.loads(attributes["Attributes"]["RedrivePolicy"])["deadLetterTargetArn"])


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    work = tmp_path / "cwd"
    work.mkdir()
    yield work
    # make run must not write into the directory it was started from
    assert list(work.iterdir()) == []


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_make_run_serves_a_transaction_and_ctrl_c_stops_the_whole_tree(
    tmp_path: Path, workdir: Path
) -> None:
    state = tmp_path / "state"
    run = _start(workdir, state, tmp_path / "run1.log")
    try:
        banner = run.output()
        key = _banner_key(banner)
        assert f"API        {run.base}" in banner
        assert f"curl -s -X POST {run.base}/api/v1/relay/direct -H 'X-API-Key: {key}'" in banner
        assert "redis      off" in banner  # Redis only when REDIS_URL is set
        assert f"sqlite:///{state / 'relay.db'}" in banner
        commands = " | ".join(run.seen.values())
        for part in (
            "ministack",
            "anvil",
            "relayer_stub.main",
            "queue_consumer.main",
            "relay_api.cli serve",
        ):
            assert part in commands, f"{part} not in the process tree: {run.seen}"

        assert _redrive_target(banner).endswith(":relay-transactions-dlq")

        headers = {"X-API-Key": key, "Idempotency-Key": "make-run-test"}
        accepted = httpx.post(
            f"{run.base}/api/v1/relay/direct",
            headers=headers,
            json={"to": "0x000000000000000000000000000000000000dEaD", "value": "1", "data": "0x"},
            timeout=10,
        )
        assert accepted.status_code == 202, accepted.text
        transaction_id = accepted.json()["transactionId"]

        status = _final_status(run, transaction_id, headers)
        assert status.get("status") == "confirmed", status
        chain = _chain_rpc(banner)
        receipt = _receipt(chain, str(status["hash"]))
        assert receipt is not None, status
        assert receipt["status"] == "0x1"

        # The gasless example, as the banner says to run it: no arguments beside make run.
        example = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "gasless.py")],
            cwd=ROOT,
            env=_clean_env(state, run.port),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert example.returncode == 0, example.stdout + example.stderr
        assert re.search(r"^status\s+confirmed$", example.stdout, re.MULTILINE), example.stdout
        gasless_hash = re.search(r"^hash\s+(0x[0-9a-f]{64})$", example.stdout, re.MULTILINE)
        assert gasless_hash, example.stdout
        assert _receipt(chain, gasless_hash.group(1)) is not None
    finally:
        took = _interrupt(run)
    output = run.output()
    assert took < STOP_GRACE_S
    assert "consumer.stopped" in output  # the consumer drained and said so
    assert re.search(r'"abandoned":\s*0', output), output[-3000:]
    assert re.search(r"^stopped$", output, re.MULTILINE), output[-2000:]

    # A second `make run` on the same state directory reuses the database and the dev key.
    again = _start(workdir, state, tmp_path / "run2.log")
    try:
        assert _banner_key(again.output()) == key
        reread = httpx.get(
            f"{again.base}/api/v1/relay/status/{transaction_id}", headers=headers, timeout=10
        )
        assert reread.status_code == 200, reread.text
        assert reread.json()["status"] == "confirmed"
        # The same chain, loaded from the state directory: the transaction is still on it.
        assert _receipt(_chain_rpc(again.output()), str(status["hash"])) is not None
    finally:
        _interrupt(again)


@pytest.mark.localstack
@pytest.mark.timeout(240)
def test_make_run_on_localstack_serves_a_transaction_and_ctrl_c_stops_it(
    tmp_path: Path, workdir: Path
) -> None:
    """`RELAY_LOCAL_SQS=localstack make run`: LocalStack's core instead of ministack."""
    run = _start(
        workdir, tmp_path / "state", tmp_path / "run.log", {"RELAY_LOCAL_SQS": "localstack"}
    )
    try:
        banner = run.output()
        assert re.search(r"SQS        http://127\.0\.0\.1:\d+  \(localstack-core 2026\.", banner)
        commands = " | ".join(run.seen.values())
        assert "localstack.runtime.main" in commands, run.seen
        assert "ministack" not in commands, run.seen
        assert _redrive_target(banner).endswith(":relay-transactions-dlq")
        key = _banner_key(banner)
        headers = {"X-API-Key": key}
        accepted = httpx.post(
            f"{run.base}/api/v1/relay/direct",
            headers=headers,
            json={
                "to": "0x000000000000000000000000000000000000dEaD",
                "value": "1",
                "speed": "fast",
            },
            timeout=10,
        )
        assert accepted.status_code == 202, accepted.text
        transaction_id = accepted.json()["transactionId"]
        refused = httpx.post(
            f"{run.base}/api/v1/relay/direct", headers=headers, json={"to": "0x12"}, timeout=10
        )
        assert refused.status_code == 422, refused.text
        status = _final_status(run, transaction_id, headers)
        assert status.get("status") == "confirmed", status
    finally:
        took = _interrupt(run)
    assert took < STOP_GRACE_S


def _readme_blocks(language: str) -> list[str]:
    """The README's ``language`` code blocks under "Using it", as written."""
    text = (ROOT / "README.md").read_text()
    start = text.index("## Using it")
    section = text[start : text.index("\n## ", start + 1)]
    return re.findall(rf"```{language}\n(.*?)```", section, re.DOTALL)


@pytest.mark.readme
@pytest.mark.timeout(1200)
def test_the_readmes_commands_work_on_a_fresh_clone(tmp_path: Path) -> None:
    """A newcomer's path: clone, `make run` (it installs everything it needs), then every
    command of the README's "Using it" as written, from the clone's directory, with nothing
    on the PATH but the system's (no uv) and no RELAY_ variable set."""
    clone = tmp_path / "relay"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=300)
    state = clone / ".relay"  # where make run keeps it by default, and the README reads it
    # no virtualenv of this checkout on the PATH, and for the README's commands no uv either
    system = [part for part in os.environ["PATH"].split(":") if "/.venv/" not in part + "/"]
    run = _start(
        clone,
        state,
        tmp_path / "run.log",
        {"PATH": ":".join(system)},
        root=clone,
        startup_s=900,
    )
    bare = [part for part in system if not part.endswith("/.local/bin")]
    env = {**_clean_env(state, run.port), "PATH": ":".join(bare)}
    env.pop("RELAY_STATE_DIR")  # the README's commands find .relay/ by themselves
    try:
        shell = _readme_blocks("sh")
        assert len(shell) >= 2, shell
        outputs = []
        for block in shell:
            script = block.replace("127.0.0.1:8000", f"127.0.0.1:{run.port}")
            done = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", script],
                cwd=clone,
                env=env,
                capture_output=True,
                text=True,
                timeout=180,
            )
            assert done.returncode == 0, f"{script}\n{done.stdout}\n{done.stderr}"
            outputs.append(done.stdout)
        submitted, over_http = outputs[0], outputs[1]
        assert re.search(r"^\S+\s+confirmed\s+direct\s", submitted, re.MULTILINE), submitted
        assert re.search(r"^status\s+confirmed$", submitted, re.MULTILINE), submitted  # gasless
        assert json.loads(over_http.splitlines()[0])["status"] == "pending", over_http

        (python,) = _readme_blocks("python")[:1]
        key = (state / "dev-api-key").read_text().strip()
        snippet = python.replace("127.0.0.1:8000", f"127.0.0.1:{run.port}")
        done = subprocess.run(
            [str(clone / ".venv" / "bin" / "python"), "-c", f"KEY = {key!r}\n{snippet}"],
            cwd=clone,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "confirmed", done.stdout
    finally:
        _interrupt(run)
