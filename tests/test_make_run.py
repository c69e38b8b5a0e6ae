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
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import botocore.session
import httpx
import pytest

from relay_testkit import makerun
from relay_testkit.makerun import ROOT, STOP_GRACE_S, MakeRun
from relay_testkit.makerun import clean_env as _clean_env

CONFIRMED_S = 30.0  # a block a second, confirmed two blocks later
DEAD = "0x000000000000000000000000000000000000dEaD"


def _start(*args: Any, **kwargs: Any) -> MakeRun:
    try:
        return makerun.start(*args, **kwargs)
    except makerun.MakeRunFailed as exc:
        pytest.fail(str(exc))


def _interrupt(run: MakeRun) -> float:
    try:
        return makerun.interrupt(run)
    except makerun.MakeRunFailed as exc:
        pytest.fail(str(exc))


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
        # The consumer's follower read it in the executor's confirmed list (make run's
        # executor sends no webhooks, as shipped): not the tracker 15 s after the last news.
        with sqlite3.connect(state / "relay.db") as db:
            sources = dict(
                db.execute(
                    "SELECT to_status, source FROM transaction_events WHERE transaction_id = ?",
                    (transaction_id,),
                ).fetchall()
            )
        assert sources.get("confirmed") == "follower", sources

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


def _relay(run: MakeRun, state: Path, *args: str) -> str:
    """The `relay` command against this make run's database, as an operator runs it."""
    done = subprocess.run(
        [sys.executable, "-m", "relay_api.cli", *args],
        env={**_clean_env(state, run.port), "DATABASE_URL": f"sqlite:///{state / 'relay.db'}"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _created_key(output: str) -> str:
    return output.strip().splitlines()[-1]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_make_run_is_safe_by_default(tmp_path: Path, workdir: Path) -> None:
    """Issue 27 on the shipped defaults: a new key spends nothing until an admin grants it a
    policy; the fee budget refuses past `dailyFeeWei`; an admin key submits nothing; the audit
    log names the change and who made it, and a client key may not read it; the executor's
    /__admin is closed to anything without its token."""
    state = tmp_path / "state"
    run = _start(workdir, state, tmp_path / "run.log")
    try:
        created = _relay(run, state, "keys", "create", "--name", "x")
        assert "may submit nothing until it is granted a spend policy" in created, created
        client = {"X-API-Key": _created_key(created)}
        admin = {
            "X-API-Key": _created_key(
                _relay(run, state, "keys", "create", "--name", "ops", "--role", "admin")
            )
        }
        api = httpx.Client(base_url=run.base, timeout=10)
        with api:

            def submit(headers: dict[str, str], gas_limit: int, n: int) -> httpx.Response:
                return api.post(
                    "/api/v1/relay/direct",
                    headers={**headers, "Idempotency-Key": f"safe-{n}"},
                    json={"to": DEAD, "value": "1", "gasLimit": str(gas_limit)},
                )

            refused = submit(client, 21_000, 1)
            assert refused.status_code == 403, refused.text
            assert refused.json()["error"] == "policy_refused"
            assert refused.json()["detail"].startswith("policy noPolicy: "), refused.text

            # 0.001 ETH of fees a day: one 21,000-gas transfer (~21,000 x a few gwei) fits,
            # 10 M gas at any fee per gas a chain asks does not.
            policy = {
                "allowedTo": [DEAD],
                "maxValueWei": "10",
                "dailyValueWei": "100",
                "maxGas": 10_000_000,
                "dailyFeeWei": str(10**15),
            }
            granted = api.patch("/api/v1/admin/clients/x", headers=admin, json=policy)
            assert granted.status_code == 200, granted.text
            assert granted.json()["policy"]["granted"] is True
            assert granted.json()["policy"]["grantedBy"] == "ops (admin)"

            accepted = submit(client, 21_000, 2)
            assert accepted.status_code == 202, accepted.text
            past_fees = submit(client, 10_000_000, 3)
            assert past_fees.status_code == 403, past_fees.text
            assert past_fees.json()["detail"].startswith("policy dailyFeeWei: "), past_fees.text

            by_admin = submit(admin, 21_000, 4)
            assert by_admin.status_code == 403, by_admin.text

            trail = api.get("/api/v1/admin/audit", headers=admin)
            assert trail.status_code == 200, trail.text
            change = next(e for e in trail.json()["entries"] if e["action"] == "client.change")
            assert change["actor"]["name"] == "ops"
            assert change["target"]["name"] == "x"
            assert change["before"]["policy"]["granted"] is False
            assert change["after"]["policy"]["dailyFeeWei"] == str(10**15)
            assert api.get("/api/v1/admin/audit", headers=client).status_code == 403

        executor = run.banner("executor")
        assert httpx.post(f"{executor}/__admin/reset", timeout=10).status_code == 401
        stats = httpx.get(f"{executor}/__admin/stats", headers=run.stub_admin, timeout=10)
        assert stats.status_code == 200, stats.text
    finally:
        _interrupt(run)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_relay_command_works_beside_make_run_in_a_new_shell(
    tmp_path: Path, workdir: Path
) -> None:
    """Every `relay` command the banner prints, and the operator's everyday ones, run from the
    directory that holds `.relay/` in a shell with no Relay environment at all: they find the
    database, the SQS server, the executor and the API that this `make run` chose. A lane
    left paused is named by the next run's banner."""
    here = tmp_path / "checkout"
    state = here / ".relay"
    state.mkdir(parents=True)
    run = _start(workdir, state, tmp_path / "run.log")
    bare = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", str(tmp_path))}
    relay = str(ROOT / ".venv" / "bin" / "relay")

    def command(*args: str) -> str:
        done = subprocess.run(
            [relay, *args], cwd=here, env=bare, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, f"relay {' '.join(args)}:\n{done.stdout}{done.stderr}"
        return done.stdout

    try:
        banner = run.output()
        printed = re.findall(r"\.venv/bin/relay ([a-z][^#)\n]*?)\s*(?:\)|#|$)", banner, re.M)
        assert {"keys create --name ops --role admin", "tx list", "queues status"} <= set(printed)
        for line in printed:
            command(*line.split())
        accepted = command("tx", "submit", "--to", DEAD, "--value", "1")
        transaction_id = accepted.split()[1]  # "accepted <id>"
        assert transaction_id in command("tx", "status", transaction_id)
        status = command("queues", "status")
        assert "lane normal" in status, status
        assert "visible" in status, status  # the queues' depths: SQS was found
        assert "0 message(s)" in command("dlq", "list")
        assert "ops" in command("keys", "list")
        assert "client.create" in command("audit")
        command("queues", "pause", "--lane", "fast", "--reason", "looking into it")
    finally:
        _interrupt(run)
    assert not (state / "endpoints.json").exists()  # a stopped run leaves nothing to adopt
    # The switch outlives the run: the next one says so, with the command that undoes it.
    again = _start(workdir, state, tmp_path / "run-again.log")
    try:
        note = re.search(
            r"^\s+NOTE\s+lane fast is paused .*looking into it.*$", again.output(), re.M
        )
        assert note, again.output()
        assert ".venv/bin/relay queues resume --lane fast" in again.output()
    finally:
        _interrupt(again)


def _pool_states(run: MakeRun, state: Path) -> dict[str, str]:
    view = json.loads(_relay(run, state, "relayers", "--json"))
    return {item["relayer"]: item["state"] for item in view["relayers"]}


def _rows(state: Path, ids: list[str]) -> list[tuple[str, str, str | None]]:
    """(id, status, relayer) of each of ``ids``, from make run's database."""
    with sqlite3.connect(state / "relay.db") as db:
        marks = ",".join("?" * len(ids))
        query = f"SELECT id, status, relayer FROM transactions WHERE id IN ({marks})"  # noqa: S608
        return [tuple(row) for row in db.execute(query, ids).fetchall()]


def _all_confirmed(state: Path, ids: list[str], within_s: float) -> float:
    """Seconds until every one of ``ids`` is confirmed (fails after ``within_s``)."""
    started = time.monotonic()
    while (rows := _rows(state, ids)) and any(status != "confirmed" for _, status, _ in rows):
        assert time.monotonic() - started < within_s, sorted({status for _, status, _ in rows})
        time.sleep(0.25)
    return time.monotonic() - started


@pytest.mark.ops
@pytest.mark.timeout(420)
def test_make_run_with_three_relayers_starves_a_jammed_one_and_executes_nothing_twice(
    tmp_path: Path, workdir: Path
) -> None:
    """Issue 29's must-show on the shipped defaults: `RELAY_DEV_RELAYERS=3 make run`, the
    executor sending no webhooks. Transactions are spread over the three; relayer-2, jammed
    through the stub, is seen `jammed` within a minute and takes no new work; once the jam is
    lifted everything is confirmed, and the payee's balance counts each transfer once."""
    state = tmp_path / "state"
    run = _start(workdir, state, tmp_path / "make-run.log", {"RELAY_DEV_RELAYERS": "3"})
    try:
        headers = {"X-API-Key": run.key}
        payee = "0x" + os.urandom(20).hex()

        def send(count: int) -> list[str]:
            return [
                httpx.post(
                    f"{run.base}/api/v1/relay/direct",
                    headers=headers,
                    json={"to": payee, "value": "1"},
                    timeout=10,
                ).json()["transactionId"]
                for _ in range(count)
            ]

        def relayers_of(ids: list[str]) -> dict[str | None, int]:
            spread: dict[str | None, int] = {}
            for _, _, relayer in _rows(state, ids):
                spread[relayer] = spread.get(relayer, 0) + 1
            return spread

        first = send(45)
        _all_confirmed(state, first, CONFIRMED_S)
        assert relayers_of(first) == {"relayer-1": 15, "relayer-2": 15, "relayer-3": 15}

        faults = f"{run.banner('executor')}/__admin/faults"
        httpx.patch(
            faults, headers=run.stub_admin, json={"jam_relayers": ["relayer-2"]}
        ).raise_for_status()
        jammed = time.monotonic()
        meanwhile: list[str] = []
        while _pool_states(run, state)["relayer-2"] != "jammed":
            assert time.monotonic() - jammed < 60, _pool_states(run, state)
            meanwhile += send(1)
            time.sleep(1)
        print(f"relayer-2 seen jammed {time.monotonic() - jammed:.1f} s after the jam")  # noqa: T201
        after = send(16)
        assert "relayer-2" not in relayers_of(after), relayers_of(after)

        httpx.patch(faults, headers=run.stub_admin, json={"jam_relayers": []}).raise_for_status()
        everything = first + meanwhile + after
        took = _all_confirmed(state, everything, 120)
        print(f"all {len(everything)} confirmed {took:.1f} s after the jam was lifted")  # noqa: T201
        balance = httpx.post(
            _chain_rpc(run.output()),
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "eth_getBalance",
                "params": [payee, "latest"],
            },
            timeout=10,
        ).json()["result"]
        assert int(balance, 16) == len(everything)
    finally:
        _interrupt(run)
