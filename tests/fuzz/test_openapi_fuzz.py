"""Fuzzing the running relay-api over its own OpenAPI document (``make test-fuzz``, a step of
.ci/run): schemathesis generates requests from the schema (valid and invalid) against `relay
serve` on real MariaDB, Redis and SQS, for a bounded time, once with an admin's key (every
route) and once with a client's (what integrators call, and the 403s of the rest).

Every check applies (``--checks all``: no server error, every status and body as documented,
invalid input refused with 4xx, authentication not ignored, data the schema calls valid
accepted...). For that last one, schemathesis.toml lists what a schema-valid request may still
get: the documented 400s of rules a schema cannot state (an EIP-55 checksum, a deadline in the
past, a cursor the API never issued, a signature that does not verify), 401 (the executor's
webhooks, signed with a key the fuzzer does not have), 403 (a policy, a role), 404 (an id that
does not exist), 409, 429. A 422 or a 413 for data the schema allows is a
finding: the document promises what the server refuses."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from relay_core import queue as queue_mod
from relay_core.settings import InfraSettings
from relay_devstack import localchain
from relay_devstack.localsqs import free_port, stop_process
from relay_testkit import infra_process_env, new_api_key, wait_http

CONFIG = Path(__file__).with_name("schemathesis.toml")
MAX_TIME_S = int(os.environ.get("RELAY_FUZZ_MAX_TIME_S", "90"))  # per kind of key

pytestmark = pytest.mark.fuzz


@pytest.mark.parametrize("role", ["admin", "client"])
@pytest.mark.timeout(MAX_TIME_S + 180)
async def test_no_server_error_and_every_response_as_documented(
    infra_env: dict[str, Any], sqs: Any, tmp_path: Path, role: str
) -> None:
    await queue_mod.create_queues(sqs, InfraSettings(**infra_env))
    # A chain with the forwarder deployed: gasless on, its nonce endpoint answering.
    chain = localchain.start(log_path=tmp_path / "anvil.log")
    try:
        deployment = await localchain.deploy(chain.rpc_url)
        await _fuzz(infra_env, chain, deployment, tmp_path, role)
    finally:
        chain.stop()


async def _fuzz(
    infra_env: dict[str, Any],
    chain: localchain.LocalChain,
    deployment: localchain.Deployment,
    tmp_path: Path,
    role: str,
) -> None:
    port = free_port()
    env = infra_process_env(
        infra_env,
        RELAY_FORWARDER_ADDRESS=deployment.forwarder,
        RELAY_CHAIN_ID=str(deployment.chain_id),
        RELAY_CHAIN_RPC_URL=chain.rpc_url,
        RELAY_WEBHOOK_SIGNING_KEY="fuzz-webhook-signing-key-0123456789abcdef",
        PORT=str(port),
    )
    # An admin key reaches every route; a client's (granted any destination, as `relay keys
    # create --any-destination` makes it) submits. Their rate limit is above what the fuzzer
    # sends, so the requests test the API rather than the limiter (whose 429 is documented).
    key = new_api_key(env, f"fuzz-{role}", role=role, rate_per_s=100_000, burst=100_000)
    base = f"http://127.0.0.1:{port}"
    reports = tmp_path / "reports"
    with open(tmp_path / "api.log", "ab") as log:
        api = subprocess.Popen(
            [sys.executable, "-m", "relay_api.cli", "serve"], env=env, stdout=log, stderr=log
        )
        try:
            wait_http(f"{base}/health", api)
            run = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "schemathesis.cli",
                    "--config-file",
                    str(CONFIG),
                    "run",
                    f"{base}/openapi.json",
                    "--checks",
                    "all",
                    "--header",
                    f"X-API-Key: {key}",
                    "--max-time",
                    str(MAX_TIME_S),
                    # One worker: with two, hypothesis describes its filters by parsing
                    # source in both threads at once, and CPython 3.11's ast.parse is not
                    # safe for that ("AST constructor recursion depth mismatch").
                    "--workers",
                    "1",
                    "--seed",
                    os.environ.get("RELAY_FUZZ_SEED", "20261124"),
                    "--report",
                    "junit",
                    "--report-dir",
                    str(reports),
                    "--no-color",
                ],
                env={**env, "SCHEMATHESIS_HOOKS": ""},
                capture_output=True,
                text=True,
                timeout=MAX_TIME_S + 120,
            )
        finally:
            stop_process(api)
    output = run.stdout + run.stderr
    # RELAY_FUZZ_LOG / RELAY_FUZZ_SUMMARY: where to keep them, one per kind of key
    log_path = Path(f"{os.environ.get('RELAY_FUZZ_LOG', tmp_path / 'schemathesis')}-{role}.log")
    log_path.write_text(output)
    counts = _counts(reports, output)
    summary = output[output.rfind("=== SUMMARY") :] if "=== SUMMARY" in output else output[-3000:]
    sys.stdout.write(f"\n{summary}\nfuzz ({role}'s key): {counts}\n")
    Path(f"{os.environ.get('RELAY_FUZZ_SUMMARY', tmp_path / 'summary')}-{role}.txt").write_text(
        f"{counts}\n"
    )
    api_log = (tmp_path / "api.log").read_text(errors="replace")
    server_errors = api_log.count("api.unhandled_error")
    # What the API said of its own errors goes with a failure: CI keeps no log files.
    said = "\n".join(line for line in api_log.splitlines() if '"level":"error"' in line)
    assert run.returncode == 0, f"{output[-6000:]}\nthe API's errors:\n{said[-3000:]}"
    assert server_errors == 0, "the API logged unhandled errors (see its log)"
    assert counts["operations"] >= 10, counts


def _counts(reports: Path, output: str) -> dict[str, int]:
    """Operations tested and failures from the JUnit report; test cases from the summary."""
    operations = failures = errors = 0
    for report in reports.glob("*.xml"):
        # our own tool's report, written a moment ago
        for case in ET.parse(report).getroot().iter("testcase"):  # noqa: S314
            operations += 1
            failures += len(case.findall("failure"))
            errors += len(case.findall("error"))
    generated = re.search(r"(\d[\d,]*) generated", output)
    return {
        "operations": operations,
        "test_cases": int(generated.group(1).replace(",", "")) if generated else -1,
        "failures": failures,
        "errors": errors,
    }
