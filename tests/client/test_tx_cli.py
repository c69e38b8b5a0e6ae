"""``relay tx`` at a terminal against the real system (tests/conftest.py's stack): submit and
wait, status, list, JSON output, the documented exit codes, and no configuration needed beside
`make run` (the local API and the development key it wrote)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from relay_api.exitcodes import (
    EXIT_NOT_CONFIRMED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
)
from relay_devstack.localsqs import free_port
from relay_testkit import new_api_key

DEAD = "0x000000000000000000000000000000000000dEaD"


def _tx(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relay_api.cli", "tx", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _env(stack: Any, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    return {**env, "RELAY_API_URL": stack.api_url, "RELAY_API_KEY": stack.api_key, **extra}


def test_submit_wait_status_and_list_read_well_and_as_json(stack: Any) -> None:
    env = _env(stack)
    submitted = _tx(env, "submit", "--to", DEAD, "--value", "5", "--wait", "--timeout", "60")
    assert submitted.returncode == EXIT_OK, submitted.stderr
    lines = submitted.stdout.splitlines()
    assert lines[0].startswith("accepted ")
    transaction_id = lines[0].split()[1].rstrip(";")
    assert lines[1].split() == [
        "transaction",
        "status",
        "type",
        "created",
        "(UTC)",
        "hash",
        "/",
        "error",
    ]
    assert lines[2].split()[:3] == [transaction_id, "confirmed", "direct"]

    shown = json.loads(_tx(env, "status", transaction_id, "--json").stdout)
    assert shown["transaction_id"] == transaction_id
    assert shown["status"] == "confirmed"
    assert shown["hash"].startswith("0x")
    # What it cost, once the consumer has read its receipt: the text output shows it too.
    deadline = time.monotonic() + 30
    while shown["fee_wei"] is None:
        assert time.monotonic() < deadline, shown
        time.sleep(0.5)
        shown = json.loads(_tx(env, "status", transaction_id, "--json").stdout)
    assert shown["gas_used"] == 21_000  # a plain transfer
    assert int(shown["fee_wei"]) == shown["gas_used"] * int(shown["effective_gas_price"])
    text = _tx(env, "status", transaction_id).stdout.splitlines()
    assert text[2:] == [
        f"block:     {shown['block_number']}",
        "gas used:  21000",
        f"gas price: {shown['effective_gas_price']} wei",
        f"fee:       {shown['fee_wei']} wei",
    ]

    queued = _tx(env, "submit", "--to", DEAD, "--idempotency-key", "cli-1", "--json")
    accepted = json.loads(queued.stdout)
    assert accepted["idempotency_key"] == "cli-1"
    again = _tx(env, "submit", "--to", DEAD, "--idempotency-key", "cli-1")
    assert "(a replay: accepted before with this key)" in again.stdout

    listed = json.loads(_tx(env, "list", "--limit", "5", "--json").stdout)
    assert [item["transaction_id"] for item in listed] == [
        accepted["transaction_id"],
        transaction_id,
    ]
    table = _tx(env, "list").stdout.splitlines()
    assert len(table) == 3  # a header and two rows
    waited = _tx(env, "wait", accepted["transaction_id"], "--timeout", "60")
    assert waited.returncode == EXIT_OK, waited.stderr


def test_exit_codes_say_what_went_wrong(stack: Any) -> None:
    env = _env(stack)
    missing = _tx(env, "status", "00000000-0000-4000-8000-000000000000")
    assert missing.returncode == EXIT_NOT_FOUND
    assert "404 not_found" in missing.stderr
    invalid = _tx(env, "submit", "--to", "0x12")
    assert invalid.returncode == EXIT_USAGE
    assert "to:" in invalid.stderr
    assert _tx({**env, "RELAY_API_KEY": "rk_nobody"}, "list").returncode == EXIT_REFUSED
    nowhere = _tx({**env, "RELAY_API_URL": f"http://127.0.0.1:{free_port()}"}, "list")
    assert nowhere.returncode == EXIT_UNREACHABLE
    assert "connection_failed" in nowhere.stderr
    # a call the chain reverts: final, but not confirmed
    reverting = _tx(
        env, "submit", "--to", stack.deployment.recipient, "--data", "0xdeadbeef", "--wait"
    )
    assert reverting.returncode == EXIT_NOT_CONFIRMED, reverting.stdout + reverting.stderr
    assert "failed" in reverting.stdout
    # a cancel once it is final: too late, and where it is
    failed_id = reverting.stdout.split()[1].rstrip(";")
    late = _tx(env, "cancel", failed_id)
    assert late.returncode == EXIT_USAGE, late.stdout + late.stderr
    assert "409 conflict" in late.stderr
    assert "failed: too late" in late.stderr


def test_beside_make_run_it_needs_no_configuration(stack: Any, tmp_path: Path) -> None:
    """`make run` serves on 127.0.0.1:$PORT and writes its key to .relay/dev-api-key: with
    neither RELAY_API_URL nor RELAY_API_KEY set, `relay tx` finds both."""
    key = new_api_key(stack.env, "beside-make-run")
    state = tmp_path / ".relay"
    state.mkdir()
    (state / "dev-api-key").write_text(key + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env["PORT"] = stack.api_url.rsplit(":", 1)[1]
    done = subprocess.run(
        [sys.executable, "-m", "relay_api.cli", "tx", "submit", "--to", DEAD],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == EXIT_OK, done.stderr
    assert done.stdout.startswith("accepted ")


def test_a_file_is_sent_100_a_request_a_bad_line_is_named_and_a_rerun_sends_no_line_twice(
    stack: Any, tmp_path: Path
) -> None:
    env = _env(stack, RELAY_API_KEY=new_api_key(stack.env, "batcher", rate_per_s=1000, burst=500))
    lines = [json.dumps({"to": DEAD, "value": str(n)}) for n in range(1, 151)]
    lines[120] = json.dumps({"to": DEAD, "gasLimit": "5"})  # line 121: below 21000
    path = tmp_path / "airdrop.jsonl"
    path.write_text("\n".join(lines) + "\n")

    refused = _tx(env, "batch", str(path), "--idempotency-key", "drop-1")
    assert refused.returncode == EXIT_USAGE, refused.stderr
    assert "airdrop.jsonl: line 121: 400 bad_request: gasLimit: must be" in refused.stderr
    assert "the 100 before line 101 were accepted" in refused.stderr
    assert "request 1/2: lines 1-100 accepted" in refused.stdout

    lines[120] = json.dumps({"to": DEAD, "value": "121"})
    path.write_text("\n".join(lines) + "\n")
    done = _tx(env, "batch", str(path), "--idempotency-key", "drop-1", "--json")
    assert done.returncode == EXIT_OK, done.stderr
    answers = json.loads(done.stdout)
    assert [answer["line"] for answer in answers] == list(range(1, 151))
    assert len({answer["transaction_id"] for answer in answers}) == 150
    assert [answer["replayed"] for answer in answers] == [True] * 100 + [False] * 50
    listed = _tx(env, "list", "--limit", "200", "--json")
    assert len(json.loads(listed.stdout)) == 150  # none sent twice

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"to": "0x1"}\nnot json\n')
    usage = _tx(env, "batch", str(bad))
    assert usage.returncode == EXIT_USAGE
    assert "line 2: not JSON" in usage.stderr
