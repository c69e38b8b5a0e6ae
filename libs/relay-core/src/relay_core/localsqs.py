"""A local SQS server on loopback for development and tests (no Docker needed).

``ministack`` (fast, ~3,000 msg/s here) is the default; ``moto`` is the fallback. ministack
lives in its own virtualenv (``.tools/sqs``, installed by ``make tools``) because it pins a
botocore that aioboto3 cannot share. Both are bound to 127.0.0.1 only.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
    elif kind == "moto":
        command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    else:
        raise ValueError(f"unknown local SQS server {kind!r}: use ministack or moto")
    output = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
    process = subprocess.Popen(
        command, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
    )
    server = LocalSqs(kind=kind, port=port, process=process)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{kind} exited with code {process.returncode} while starting")
        try:
            # Any HTTP answer means the server is up; SQS itself is checked by the caller.
            with urllib.request.urlopen(f"{server.endpoint}/", timeout=1):  # noqa: S310
                return server
        except urllib.error.HTTPError:
            return server
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise RuntimeError(f"{kind} did not start on 127.0.0.1:{port} within 30 s")
