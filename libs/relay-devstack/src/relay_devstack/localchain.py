"""A local EVM chain for development and tests: anvil on loopback, and Relay's contracts on it.

``make chain`` installs anvil, solc and OpenZeppelin Contracts from the npm registry into
``.tools/chain`` (pinned by tools/chain/package-lock.json) and compiles
``ERC2771Forwarder`` and ``RelayRecipient`` from source into
``.tools/chain/build/contracts.json``; nothing is downloaded at run time. :func:`start` runs
anvil on a free 127.0.0.1 port; :func:`deploy` puts the forwarder and the recipient on it.

Accounts are anvil's development ones (the well-known ``test … junk`` mnemonic; :func:`start`
funds ``DEV_ACCOUNTS`` of them): account 0 is the first relayer's (the relayer-stub signs with
it), account 1 deploys, 2 to 9 are free for senders of gasless requests, and 10 to 18 are the
relayer-stub's further relayers (:func:`relayer_account`). Their keys are public: never use
them on a real network.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eth_account import Account
from eth_account.signers.local import LocalAccount
from eth_utils import to_checksum_address

from relay_core import evm
from relay_devstack.localsqs import free_port, repo_root, stop_process

DEV_MNEMONIC = "test test test test test test test test test test test junk"
DEV_CHAIN_ID = 31337
FORWARDER_NAME = "ERC2771Forwarder"
RELAYER_ACCOUNT, DEPLOYER_ACCOUNT, SENDER_ACCOUNT = 0, 1, 2
DEV_ACCOUNTS = 20  # funded by `start` (anvil's --accounts; its default is 10)
MAX_DEV_RELAYERS = 10  # relayers the dev accounts can give a key to (relayer_account)
_FIRST_EXTRA_RELAYER_ACCOUNT = 10


def relayer_account(position: int) -> int:
    """The dev account of the relayer at ``position`` (0-based, the order of the stub's
    relayer ids): the first is ``RELAYER_ACCOUNT`` (0), as always; the others take 10, 11, …
    so they never share an account with the deployer or the senders (1 to 9)."""
    if not 0 <= position < MAX_DEV_RELAYERS:
        raise ValueError(f"the dev chain has accounts for {MAX_DEV_RELAYERS} relayers, not more")
    if position == 0:
        return RELAYER_ACCOUNT
    return _FIRST_EXTRA_RELAYER_ACCOUNT + position - 1


def dev_account(index: int) -> LocalAccount:
    Account.enable_unaudited_hdwallet_features()
    account: LocalAccount = Account.from_mnemonic(
        DEV_MNEMONIC, account_path=f"m/44'/60'/0'/0/{index}"
    )
    return account


def tools_dir() -> Path:
    return Path(os.environ.get("RELAY_CHAIN_TOOLS") or repo_root() / ".tools" / "chain")


def anvil_executable() -> str | None:
    explicit = os.environ.get("RELAY_ANVIL_BIN")
    packaged = tools_dir() / "node_modules" / "@foundry-rs" / "anvil-linux-amd64" / "bin" / "anvil"
    for candidate in (explicit, str(packaged), shutil.which("anvil")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def artifacts() -> dict[str, Any]:
    path = tools_dir() / "build" / "contracts.json"
    if not path.exists():
        raise RuntimeError(f"no compiled contracts at {path}: run `make chain`")
    return dict(json.loads(path.read_text()))


@dataclass
class LocalChain:
    port: int
    process: subprocess.Popen[bytes]
    chain_id: int = DEV_CHAIN_ID

    @property
    def rpc_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self, timeout_s: float = 10.0) -> None:
        stop_process(self.process, timeout_s)


def start(
    port: int | None = None,
    *,
    block_time_s: float = 0,
    log_path: Path | None = None,
    state_path: Path | None = None,
) -> LocalChain:
    """Start anvil on 127.0.0.1 and wait until it answers. ``block_time_s`` 0 mines each
    transaction at once; otherwise a block every that many seconds. With ``state_path`` the
    chain is loaded from that file if it exists and saved to it (every 5 s and on exit)."""
    executable = anvil_executable()
    if executable is None:
        raise RuntimeError("anvil is not installed: run `make chain`")
    port = port or free_port()
    command = [
        executable,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--chain-id",
        str(DEV_CHAIN_ID),
        "--accounts",
        str(DEV_ACCOUNTS),
    ]
    if block_time_s:
        command += ["--block-time", str(block_time_s)]
    if state_path is not None:
        command += ["--state", str(state_path), "--state-interval", "5"]
    output = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
    process = subprocess.Popen(
        command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
    )
    chain = LocalChain(port, process)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"anvil exited with code {process.returncode} while starting")
        if _answers(chain.rpc_url):
            return chain
        time.sleep(0.1)
    chain.stop()
    raise RuntimeError(f"anvil did not answer on 127.0.0.1:{port} within 30 s")


def _answers(url: str) -> bool:
    """A blocking eth_chainId (callers may or may not be inside an event loop)."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []})
    request = urllib.request.Request(  # noqa: S310 (loopback only)
        url, data=body.encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=1) as response:  # noqa: S310
            return int(json.loads(response.read())["result"], 16) == DEV_CHAIN_ID
    except (OSError, ValueError, KeyError):
        return False


@dataclass
class Deployment:
    chain_id: int
    forwarder: str
    recipient: str
    forwarder_name: str = FORWARDER_NAME
    abis: dict[str, Any] = field(default_factory=dict, repr=False)


async def deploy(rpc_url: str, *, forwarder_name: str = FORWARDER_NAME) -> Deployment:
    """Deploy the forwarder, then a recipient that trusts it; from the deployer account."""
    built = artifacts()["contracts"]
    rpc = evm.EvmRpc(rpc_url)
    deployer = dev_account(DEPLOYER_ACCOUNT)
    try:
        chain_id = await rpc.chain_id()
        forwarder = await _create(
            rpc,
            deployer,
            chain_id,
            built["ERC2771Forwarder"]["bytecode"],
            ["string"],
            [forwarder_name],
        )
        recipient = await _create(
            rpc, deployer, chain_id, built["RelayRecipient"]["bytecode"], ["address"], [forwarder]
        )
    finally:
        await rpc.aclose()
    return Deployment(
        chain_id,
        forwarder,
        recipient,
        forwarder_name,
        {name: contract["abi"] for name, contract in built.items()},
    )


async def deployed(rpc_url: str, address: str) -> bool:
    """Whether a contract lives at ``address`` (a chain loaded from saved state keeps it)."""
    rpc = evm.EvmRpc(rpc_url)
    try:
        code = await rpc.call("eth_getCode", address, "latest")
    finally:
        await rpc.aclose()
    return isinstance(code, str) and len(code) > 2


async def _create(
    rpc: evm.EvmRpc,
    account: LocalAccount,
    chain_id: int,
    bytecode: str,
    types: list[str],
    args: list[Any],
) -> str:
    from eth_abi import encode as abi_encode

    data = bytecode + abi_encode(types, args).hex()
    nonce = await rpc.nonce(account.address)
    gas = await rpc.estimate_gas({"from": account.address, "data": data})
    tx: dict[str, Any] = {
        "nonce": nonce,
        "gas": gas + gas // 5,
        "gasPrice": await rpc.gas_price(),
        "data": data,
        "value": 0,
        "chainId": chain_id,
    }
    signed = account.sign_transaction(tx)
    tx_hash = await rpc.send_raw("0x" + signed.raw_transaction.hex().removeprefix("0x"))
    receipt = await wait_for_receipt(rpc, tx_hash)
    if int(receipt["status"], 16) != 1:
        raise RuntimeError(f"contract creation {tx_hash} reverted")
    return to_checksum_address(receipt["contractAddress"])


async def wait_for_receipt(rpc: evm.EvmRpc, tx_hash: str, timeout_s: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        receipt = await rpc.receipt(tx_hash)
        if receipt is not None:
            return receipt
        await asyncio.sleep(0.02)
    raise TimeoutError(f"no receipt for {tx_hash} within {timeout_s} s")
