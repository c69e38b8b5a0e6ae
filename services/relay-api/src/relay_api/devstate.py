"""What a running ``make run`` chose, for the ``relay`` command beside it.

``relay dev`` picks free ports for SQS, the executor and the chain, and keeps the database
under its state directory (``.relay/``). Once everything answers it writes those endpoints to
``.relay/endpoints.json`` (with its process id), and removes the file when it stops. The
``relay`` command reads the file when the process that wrote it is still running, and takes
from it only what the environment does not set: a shell with no environment finds everything
``make run`` started, and a configured one is never overridden. No secret is written there.
"""

from __future__ import annotations

import json
import os
from collections.abc import MutableMapping
from pathlib import Path

ENDPOINTS_FILE = "endpoints.json"
# What the relay command may need of a running `make run` (never a key or a password).
SHARED = (
    "RELAY_API_URL",
    "DATABASE_URL",
    "REDIS_URL",
    "AWS_ENDPOINT_URL",
    "AWS_REGION",
    "RELAY_QUEUE_NAME",
    "RELAY_DLQ_NAME",
    "RELAY_FAST_QUEUE_NAME",
    "RELAY_FAST_DLQ_NAME",
    "RELAY_EXECUTOR_URL",
    "RELAY_CHAIN_RPC_URL",
    "RELAY_CHAIN_ID",
    "RELAY_FORWARDER_ADDRESS",
    "RELAY_FORWARDER_NAME",
    "RELAY_EXECUTOR_RELAYERS",  # the pool (`relay relayers`), unless it carries a key
)


def state_dir(environ: MutableMapping[str, str] = os.environ) -> Path:
    return Path(environ.get("RELAY_STATE_DIR", ".relay"))


def write(directory: Path, environ: MutableMapping[str, str] = os.environ) -> Path:
    """Record the endpoints of this ``make run`` (the names of SHARED that are set)."""
    path = directory / ENDPOINTS_FILE
    shared = {name: environ[name] for name in SHARED if environ.get(name)}
    if "apikey" in shared.get("RELAY_EXECUTOR_RELAYERS", "").lower():
        del shared["RELAY_EXECUTOR_RELAYERS"]  # a pool given as JSON with its keys stays here
    path.write_text(json.dumps({"pid": os.getpid(), "env": shared}, indent=2) + "\n")
    path.chmod(0o600)
    return path


def remove(directory: Path) -> None:
    (directory / ENDPOINTS_FILE).unlink(missing_ok=True)


def adopt(environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """Set, in ``environ``, what a running ``make run`` chose and ``environ`` does not say;
    returns what was set (nothing when no ``make run`` is running here)."""
    path = state_dir(environ) / ENDPOINTS_FILE
    try:
        recorded = json.loads(path.read_text())
        pid = int(recorded["pid"])
        shared = {str(k): str(v) for k, v in dict(recorded["env"]).items() if k in SHARED}
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    if not _running_relay(pid):
        return {}
    taken = {name: value for name, value in shared.items() if not environ.get(name)}
    environ.update(taken)
    return taken


def _running_relay(pid: int) -> bool:
    """Whether ``pid`` is a running ``relay dev`` (a file left by one that was killed, its
    process id since given to another program, is ignored)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True  # no /proc (macOS): the process exists, take its word
    return b"dev" in command and any(
        os.path.basename(part) == b"relay" or part == b"relay_api.cli" for part in command
    )
