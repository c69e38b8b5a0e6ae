"""``make run``: the whole system on one machine with embedded defaults.

One process tree: a local SQS server on a free loopback port (queue, DLQ and redrive created),
SQLite under ``.relay/`` (kept between runs), Redis only when ``REDIS_URL`` is set, a local
EVM chain (anvil, its state kept in ``.relay/anvil-state.json``) with OpenZeppelin's
ERC2771Forwarder and Relay's recipient deployed on it, the relayer-stub (executor) signing and
broadcasting on that chain, one queue-consumer, and the API on 127.0.0.1:$PORT (default 8000).
Ctrl-C stops the children in order (API first, consumer draining its in-flight work, then the
executor, the chain and SQS) and waits for them. Every setting can be overridden from the
environment; ``RELAY_DEV_CHAIN=off`` runs the executor's in-memory lifecycle instead.

The processes are started as commands, not imported: services never import each other.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from relay_api import devstate
from relay_core import apikeys
from relay_devstack import localchain, localsqs

# Longest a child may take to stop after SIGTERM. The consumer gets its drain grace on top.
GRACE_S = 30.0
# The consumer's drain grace under `make run` (110 s in production, sized for ECS's 120 s).
DEV_CONSUMER_GRACE_S = 20.0
# A dev relayer is jammed once its oldest submitted transaction stays unmined this many blocks.
DEV_JAM_AFTER_BLOCKS = 20
# Where `make run` keeps the executor's admin token (in the state directory).
STUB_ADMIN_TOKEN_FILE = "stub-admin-token"  # noqa: S105 (a file name)
WEBHOOK_KEY_FILE = "webhook-signing-key"
WEBHOOK_PATH = "/api/v1/webhooks/oz-relayer"


class DevSettings(BaseSettings):
    """Settings of `relay dev` itself; the services it starts read their own settings."""

    model_config = SettingsConfigDict(env_prefix="RELAY_", extra="ignore")

    state_dir: Path = Field(
        Path(".relay"),
        description="SQLite database, dev key, executor ledger, SQS log; kept between runs",
    )
    local_sqs: Literal["ministack", "localstack", "moto"] = Field(
        "ministack",
        description="local SQS server started when AWS_ENDPOINT_URL is unset (localstack: "
        "`make localstack` installs it; docs/local.md)",
    )
    # Read by relay_devstack.localsqs; declared here so that it is documented with the rest.
    ministack_bin: str | None = Field(
        None, description="ministack executable (default .tools/sqs/bin/ministack, then PATH)"
    )
    dev_chain: Literal["anvil", "off"] = Field(
        "anvil",
        description="anvil: a local chain with the contracts, the executor signs and sends on "
        "it; off: the executor's in-memory lifecycle (fake hashes). Ignored when "
        "RELAY_EXECUTOR_URL is set",
    )
    dev_chain_block_time_s: float = Field(
        1.0, ge=0, description="anvil mines a block this often (0: one per transaction)"
    )
    dev_chain_confirmations: int = Field(
        2, ge=1, description="blocks until the executor reports `confirmed`"
    )
    dev_relayers: int = Field(
        1,
        ge=1,
        le=localchain.MAX_DEV_RELAYERS,
        description="relayers of the pool the relayer-stub serves, each its own funded dev "
        "account (relayer-1 ... relayer-N; RELAY_EXECUTOR_RELAYERS names them for Relay). "
        "Ignored when RELAY_EXECUTOR_URL is set",
    )
    dev_webhooks: bool = Field(
        False,
        description="the relayer-stub also POSTs each status change to the API, signed, as an "
        "OZ Relayer's notification would (off: the consumer's follower reads the executor's "
        "lists, as the shipped configuration does). Ignored when RELAY_EXECUTOR_URL is set",
    )

    def relayer_ids(self) -> list[str]:
        return [f"relayer-{n}" for n in range(1, self.dev_relayers + 1)]


def _say(line: str = "") -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _wait_http(url: str, process: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url} exited with code {process.returncode} while starting")
        try:
            with urllib.request.urlopen(url, timeout=1):  # noqa: S310 (loopback only)
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {timeout_s:.0f} s")


def _kept_secret(state_dir: Path, variable: str, file_name: str, make: Callable[[], str]) -> str:
    """``variable`` when set, else the value kept in ``state_dir/file_name`` (made once, 0600)."""
    explicit = os.environ.get(variable)
    if explicit:
        return explicit
    kept = state_dir / file_name
    if kept.exists():
        return kept.read_text().strip()
    value = make()
    kept.write_text(value + "\n")
    kept.chmod(0o600)
    return value


def _dev_key(state_dir: Path) -> str:
    return _kept_secret(state_dir, "RELAY_DEV_API_KEY", "dev-api-key", apikeys.generate_key)


def _stub_admin_token(state_dir: Path) -> str:
    """The executor's /__admin (reset, faults, ledger) is closed to anything without this
    token, so a callback aimed at it by a client key cannot wipe the ledger."""
    return _kept_secret(
        state_dir, "STUB_ADMIN_TOKEN", STUB_ADMIN_TOKEN_FILE, lambda: secrets.token_urlsafe(32)
    )


def _webhook_signing_key(state_dir: Path) -> str:
    """The key the started executor signs its webhooks with and the API checks them with."""
    return _kept_secret(
        state_dir,
        "RELAY_WEBHOOK_SIGNING_KEY",
        WEBHOOK_KEY_FILE,
        lambda: secrets.token_urlsafe(32),
    )


def _start_chain(dev: DevSettings, state_dir: Path) -> tuple[localchain.LocalChain, dict[str, str]]:
    """anvil with its state in the state directory, and the contracts on it (deployed once:
    a later run finds them in the saved state)."""
    chain = localchain.start(
        block_time_s=dev.dev_chain_block_time_s,
        log_path=state_dir / "anvil.log",
        state_path=state_dir / "anvil-state.json",
    )
    record = state_dir / "chain.json"
    known = json.loads(record.read_text()) if record.exists() else None
    if known is None or not asyncio.run(localchain.deployed(chain.rpc_url, known["forwarder"])):
        deployment = asyncio.run(localchain.deploy(chain.rpc_url))
        sender = localchain.dev_account(localchain.SENDER_ACCOUNT)
        known = {
            "rpcUrl": chain.rpc_url,
            "chainId": deployment.chain_id,
            "forwarder": deployment.forwarder,
            "forwarderName": deployment.forwarder_name,
            "recipient": deployment.recipient,
            "relayer": localchain.dev_account(localchain.RELAYER_ACCOUNT).address,
            "funded": {"address": sender.address, "privateKey": sender.key.hex()},
        }
    known["rpcUrl"] = chain.rpc_url  # a new port each run
    record.write_text(json.dumps(known, indent=2) + "\n")
    return chain, known


def _relayer_lines(specs: list[Any], on_chain: bool) -> list[str]:
    """The pool, for the banner: each relayer and, on the dev chain, its account."""
    lines = []
    for position, spec in enumerate(specs):
        label = "relayers" if position == 0 else ""
        account = ""
        if on_chain and position < localchain.MAX_DEV_RELAYERS:
            account = "  " + localchain.dev_account(localchain.relayer_account(position)).address
        lines.append(f"  {label:<10} {spec.id}{account}")
    lines.append(
        f"  {'':<10} their states (.venv/bin/relay relayers); RELAY_DEV_RELAYERS=N for more"
    )
    return lines


def run() -> int:
    from relay_api.provision import create_queues, migrate, switched_lanes
    from relay_api.settings import ApiSettings

    dev = DevSettings()
    state_dir = dev.state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("RELAY_ENV", "dev")
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{state_dir / 'relay.db'}")
    os.environ.setdefault("PORT", "8000")
    # A developer's callback receiver runs on this machine: let callbacks reach loopback
    # (never anything else inside).
    os.environ.setdefault("RELAY_CALLBACK_ALLOW_LOOPBACK", "true")
    # The consumer drains for this long on Ctrl-C; it is waited for that long plus GRACE_S,
    # so a draining consumer is never killed mid-message.
    consumer_grace_s = float(
        os.environ.setdefault("RELAY_CONSUMER_GRACE_S", str(DEV_CONSUMER_GRACE_S))
    )

    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    sqs: localsqs.LocalSqs | None = None
    chain: localchain.LocalChain | None = None
    deployed: dict[str, Any] | None = None
    consumer: subprocess.Popen[bytes] | None = None
    children: list[subprocess.Popen[bytes]] = []
    try:
        if not os.environ.get("AWS_ENDPOINT_URL"):
            sqs = localsqs.start(dev.local_sqs, log_path=state_dir / "sqs.log")
            os.environ["AWS_ENDPOINT_URL"] = sqs.endpoint
        os.environ["RELAY_DEV_API_KEY"] = _dev_key(state_dir)
        if dev.dev_chain == "anvil" and not os.environ.get("RELAY_EXECUTOR_URL"):
            chain, deployed = _start_chain(dev, state_dir)
            os.environ.setdefault("RELAY_CHAIN_RPC_URL", chain.rpc_url)
            os.environ.setdefault("RELAY_CHAIN_ID", str(deployed["chainId"]))
            os.environ.setdefault("RELAY_FORWARDER_ADDRESS", deployed["forwarder"])
            os.environ.setdefault("RELAY_FORWARDER_NAME", deployed["forwarderName"])
            os.environ.setdefault("STUB_CHAIN_RPC_URL", chain.rpc_url)
            os.environ.setdefault("STUB_CHAIN_CONFIRMATIONS", str(dev.dev_chain_confirmations))
            # The dev chain makes a block a second: a relayer whose oldest submitted
            # transaction stays unmined through DEV_JAM_AFTER_BLOCKS of them is jammed (the
            # seconds rule, RELAY_RELAYER_JAM_AFTER_S, holds where blocks come slower).
            os.environ.setdefault("RELAY_RELAYER_JAM_AFTER_BLOCKS", str(DEV_JAM_AFTER_BLOCKS))
        if not os.environ.get("RELAY_EXECUTOR_URL"):  # the stub's pool is Relay's
            os.environ.setdefault("STUB_RELAYER_IDS", ",".join(dev.relayer_ids()))
            os.environ.setdefault("RELAY_EXECUTOR_RELAYERS", os.environ["STUB_RELAYER_IDS"])
        settings = ApiSettings()
        migrate(settings.database_url)
        asyncio.run(create_queues(settings, _say))

        executor_url = os.environ.get("RELAY_EXECUTOR_URL")
        stub_started = not executor_url
        if not executor_url:
            stub_port = localsqs.free_port()
            # The executor's ledger follows the chain it sent to (a fake-hash run must not
            # resume on a real chain, nor the other way round).
            ledger = "relayer-stub-chain.sqlite3" if chain else "relayer-stub.sqlite3"
            os.environ.setdefault("STUB_LEDGER_PATH", str(state_dir / ledger))
            # Statuses reach Relay as in the shipped configuration: the consumer's follower
            # reads the executor's lists every second. RELAY_DEV_WEBHOOKS=on adds the
            # executor's signed webhooks (an OZ Relayer's notification) to try that path.
            hooks: dict[str, str] = {}
            if dev.dev_webhooks:
                webhook_key = _webhook_signing_key(state_dir)
                os.environ["RELAY_WEBHOOK_SIGNING_KEY"] = webhook_key
                hooks = {
                    "STUB_WEBHOOK_URL": f"http://127.0.0.1:{settings.port}{WEBHOOK_PATH}",
                    "STUB_WEBHOOK_SIGNING_KEY": webhook_key,
                }
            stub = subprocess.Popen(
                [sys.executable, "-m", "relayer_stub.main"],
                env={
                    **os.environ,
                    "STUB_PORT": str(stub_port),
                    "STUB_ADMIN_TOKEN": _stub_admin_token(state_dir),
                    **hooks,
                },
                start_new_session=True,
            )
            children.append(stub)
            executor_url = f"http://127.0.0.1:{stub_port}"
            _wait_http(f"{executor_url}/api/v1/health", stub)
            os.environ["RELAY_EXECUTOR_URL"] = executor_url
        os.environ.setdefault(
            "RELAY_CONSUMER_HEARTBEAT_FILE", str(state_dir / "queue-consumer.heartbeat")
        )
        consumer = subprocess.Popen(
            [sys.executable, "-m", "queue_consumer.main"], start_new_session=True
        )
        children.append(consumer)

        api = subprocess.Popen(
            [sys.executable, "-m", "relay_api.cli", "serve"], start_new_session=True
        )
        children.append(api)
        base = f"http://127.0.0.1:{settings.port}"
        _wait_http(f"{base}/health", api)
        os.environ.setdefault("RELAY_API_URL", base)
        devstate.write(state_dir)  # for `relay` commands in another shell
        key = os.environ["RELAY_DEV_API_KEY"]
        _say("")
        _say("Relay is running (Ctrl-C stops everything)")
        _say(f"  API        {base}   docs {base}/docs")
        _say(
            f"  dashboard  {base}/api/v1/admin/dashboard  (an admin key: "
            ".venv/bin/relay keys create --name ops --role admin)"
        )
        kind = "external" if sqs is None else sqs.kind
        if sqs is not None and sqs.kind == "localstack":
            kind = f"localstack-core {localsqs.localstack_version()}"
        _say(f"  SQS        {os.environ['AWS_ENDPOINT_URL']}  ({kind})")
        _say(f"  executor   {executor_url}  (relayer-stub unless RELAY_EXECUTOR_URL is set)")
        if stub_started:
            _say(
                f"             its /__admin needs the token in "
                f"{state_dir / STUB_ADMIN_TOKEN_FILE} (Authorization: Bearer)"
            )
        for line in _relayer_lines(settings.relayer_specs(), deployed is not None):
            _say(line)
        if deployed is not None:
            _say(f"  chain      {deployed['rpcUrl']}  chain id {deployed['chainId']}  (anvil)")
            _say(f"  forwarder  {deployed['forwarder']}  (ERC2771Forwarder)")
            _say(f"  recipient  {deployed['recipient']}  (RelayRecipient: record(uint256))")
            _say(
                f"  funded     {deployed['funded']['address']}  "
                f"key {deployed['funded']['privateKey']}  (a dev account: public key, 10,000 ETH)"
            )
        _say(f"  database   {settings.database_url}")
        _say(f"  redis      {settings.redis_url or 'off (set REDIS_URL to enable the cache tier)'}")
        _say(f"  dev key    {key}")
        _say(
            "             (a development policy: any destination, at most 1 ETH a transaction "
            "and 100 ETH a day; a key from `relay keys create` spends nothing until granted one)"
        )
        for lane, how in asyncio.run(switched_lanes(settings)):
            _say(f"  NOTE       {how}: nothing on it is processed until")
            _say(f"             .venv/bin/relay queues resume --lane {lane}")
        _say("")
        _say("Try:")
        _say(
            f"  curl -s -X POST {base}/api/v1/relay/direct -H 'X-API-Key: {key}' "
            "-H 'Content-Type: application/json' "
            '-d \'{"to":"0x000000000000000000000000000000000000dEaD","value":"1"}\''
        )
        _say(f"  curl -s {base}/api/v1/relay/status/<transactionId> -H 'X-API-Key: {key}'")
        _say("  .venv/bin/relay tx list               # any relay command, in any shell here")
        _say("  .venv/bin/relay queues status         # finds what this run started")
        if deployed is not None:
            _say("  .venv/bin/python examples/gasless.py  # sign a ForwardRequest, relay it, wait")
        _say("")
        while not stop.is_set():
            for child in children:
                if child.poll() is not None:
                    _say(f"a child process exited with code {child.returncode}; stopping")
                    stop.set()
            stop.wait(0.5)
        return 0
    except RuntimeError as exc:
        _say(f"relay dev: {exc}")
        return 1
    finally:
        _say("stopping...")
        devstate.remove(state_dir)
        for child in reversed(children):
            localsqs.stop_process(child, GRACE_S + (consumer_grace_s if child is consumer else 0.0))
        if chain is not None:
            chain.stop()  # anvil writes its state on the way out
        if sqs is not None:
            sqs.stop()
        _say("stopped")
