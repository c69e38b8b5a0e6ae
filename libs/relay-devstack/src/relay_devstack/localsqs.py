"""A local SQS server on loopback for development and tests (no Docker needed).

``ministack`` (fast, ~3,000 msg/s here) is the default; ``localstack`` (LocalStack's open
source core, the one that has StartMessageMoveTask) and ``moto`` are the others
(``RELAY_LOCAL_SQS``; docs/local.md). ministack lives in its own virtualenv (``.tools/sqs``,
``make tools``) because it pins a botocore that aiobotocore cannot share; LocalStack in another
(``.tools/localstack``, Python 3.13, ``make localstack``). All are bound to 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    """A loopback port free now, and not the one the API is about to take (``PORT``): `make
    run` starts SQS, the chain and the executor on free ports before the API binds its own,
    and one of them landing on it would leave the API unable to start."""
    reserved = os.environ.get("PORT", "")
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if str(port) != reserved:
            return port


def repo_root() -> Path:
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "tools" / "sqs-server.txt").exists():
            return parent
    return Path.cwd()


def ministack_executable() -> str | None:
    explicit = os.environ.get("RELAY_MINISTACK_BIN")
    candidates = [explicit] if explicit else []
    candidates.append(str(repo_root() / ".tools" / "sqs" / "bin" / "ministack"))
    candidates.append(shutil.which("ministack") or "")
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def localstack_python() -> str | None:
    explicit = os.environ.get("RELAY_LOCALSTACK_PYTHON")
    candidate = explicit or str(repo_root() / ".tools" / "localstack" / "bin" / "python")
    return candidate if os.access(candidate, os.X_OK) else None


def localstack_version(python: str | None = None) -> str:
    """The installed localstack-core's version (without starting it)."""
    python = python or localstack_python()
    if python is None:
        return "not installed"
    found = subprocess.run(
        [python, "-c", "from importlib.metadata import version; print(version('localstack-core'))"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return found.stdout.strip() or "unknown"


def _sqs_ready(health: bytes) -> bool:
    try:
        state = json.loads(health)["services"]["sqs"]
    except (ValueError, KeyError, TypeError):
        return False
    return state in ("available", "running")


def stop_process(process: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``timeout_s``."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@dataclass
class LocalSqs:
    kind: str
    port: int
    process: subprocess.Popen[bytes]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self, timeout_s: float = 10.0) -> None:
        stop_process(self.process, timeout_s)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def start(
    kind: str | None = None, port: int | None = None, *, log_path: Path | None = None
) -> LocalSqs:
    """Start a local SQS server and wait until it answers."""
    kind = kind or os.environ.get("RELAY_LOCAL_SQS", "ministack")
    port = port or free_port()
    env = dict(os.environ)
    if kind == "ministack":
        executable = ministack_executable()
        if executable is None:
            raise RuntimeError(
                "ministack is not installed: run `make tools` (or set RELAY_LOCAL_SQS=moto)"
            )
        env.update(
            GATEWAY_PORT=str(port),
            BIND_HOST="127.0.0.1",
            SERVICES="sqs",
            IOT_MTLS_ENABLED="0",
            LOG_LEVEL="WARNING",
            PERSIST_STATE="0",
        )
        command = [executable]
    elif kind == "localstack":
        python = localstack_python()
        if python is None:
            raise RuntimeError(
                "LocalStack is not installed: run `make localstack` (it needs Python 3.13)"
            )
        scratch = Path(tempfile.mkdtemp(prefix="relay-localstack-"))
        env.update(
            SERVICES="sqs",
            # hypercorn binds the address it is given; LocalStack's default server (twisted)
            # would listen on every interface whatever GATEWAY_LISTEN says.
            GATEWAY_SERVER="hypercorn",
            GATEWAY_LISTEN=f"127.0.0.1:{port}",
            # queue URLs on 127.0.0.1, not a *.localstack.cloud name that needs public DNS
            LOCALSTACK_HOST=f"127.0.0.1:{port}",
            SQS_ENDPOINT_STRATEGY="path",
            LS_LOG="warn",
            DNS_ADDRESS="0",
            LOCALSTACK_VOLUME_DIR=str(scratch / "volume"),
            FILESYSTEM_ROOT=str(scratch / "filesystem"),
        )
        command = [python, "-m", "localstack.runtime.main"]
    elif kind == "moto":
        command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    else:
        raise ValueError(f"unknown local SQS server {kind!r}: use ministack, localstack or moto")
    output = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
    process = subprocess.Popen(
        command, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
    )
    server = LocalSqs(kind=kind, port=port, process=process)
    # LocalStack answers HTTP before its SQS is ready: ask its health endpoint instead.
    probe = "/_localstack/health" if kind == "localstack" else "/"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{kind} exited with code {process.returncode} while starting")
        try:
            # Any HTTP answer means the server is up (SQS itself is checked by the caller);
            # LocalStack's health must list SQS as available or running.
            url = f"{server.endpoint}{probe}"
            with urllib.request.urlopen(url, timeout=1) as answer:  # noqa: S310
                if kind != "localstack" or _sqs_ready(answer.read()):
                    return server
        except urllib.error.HTTPError:
            if kind != "localstack":
                return server
        except OSError:
            pass
        time.sleep(0.1)
    server.kill()
    raise RuntimeError(f"{kind} did not start on 127.0.0.1:{port} within 60 s")
