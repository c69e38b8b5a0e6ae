"""A Spark standalone cluster on this machine's loopback: one master and N workers, started
from the installed pyspark (its ``bin/spark-class``; nothing is downloaded).

It exists so that the cluster code path — a ``spark://`` master, executors in JVMs of their
own that fetch the JDBC driver from the driver and share nothing with it but the network and
the filesystem — is run by a test and by ``make pipeline-cluster``, not only on EMR or
Kubernetes. It is not a way to run Spark in production: no authentication, no history server,
no high availability, every port on 127.0.0.1.

Each daemon is a process group of its own (the executors a worker starts join the worker's
group), so :meth:`LocalCluster.stop` ends the daemons and their executors by group id and
nothing is left behind, whatever happened in between.

``python -m relay_pipeline.localcluster`` (``make pipeline-cluster``) starts a master and two
workers, runs ``relay-pipeline report`` on them against ``DATABASE_URL`` — or, when that is
unset, a demo SQLite database it seeds — prints where the report is, and stops the cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

LOOPBACK = "127.0.0.1"
# Daemon JVMs only schedule; the executors' memory is the workers' --memory.
DAEMON_MEMORY = "256m"
# The master's REST submission server listens on a fixed port (6066) and is not needed.
DAEMON_PROPERTIES = "spark.master.rest.enabled false\n"


def spark_home() -> Path:
    """SPARK_HOME, else the pyspark package (pip's pyspark ships bin/, sbin/ and jars/)."""
    explicit = os.environ.get("SPARK_HOME")
    if explicit:
        return Path(explicit)
    import pyspark

    return Path(pyspark.__file__).parent


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


@dataclass
class LocalCluster:
    root: Path
    port: int
    webui_port: int
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://{LOOPBACK}:{self.port}"

    @property
    def log_dir(self) -> Path:
        return self.root / "logs"

    def state(self) -> dict[str, object]:
        """The master's view (``/json/``): workers, cores, applications."""
        url = f"http://{LOOPBACK}:{self.webui_port}/json/"
        with urllib.request.urlopen(url, timeout=2) as response:
            return dict(json.loads(response.read()))

    def status(self) -> str:
        """The master's state (``ALIVE`` once elected); empty while it does not answer."""
        try:
            return str(self.state().get("status", ""))
        except (OSError, ValueError):
            return ""

    def alive_workers(self) -> int:
        try:
            return int(str(self.state().get("aliveworkers", 0)))
        except (OSError, ValueError):
            return 0

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM each daemon's process group (workers first: they stop their executors),
        then SIGKILL whatever is still there."""
        running = [p for p in reversed(self.processes) if p.poll() is None]
        for process in running:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for process in running:
            with suppress(subprocess.TimeoutExpired):
                process.wait(max(0.1, deadline - time.monotonic()))
        for process in self.processes:
            # The group too: an executor may outlive its worker's JVM for a moment.
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            with suppress(subprocess.TimeoutExpired):
                process.wait(5)


def _env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(spark_home()),
        # Every daemon, executor and their web UIs bind loopback (executors inherit this).
        SPARK_LOCAL_IP=LOOPBACK,
        SPARK_CONF_DIR=str(root / "conf"),
        SPARK_LOG_DIR=str(root / "logs"),
        SPARK_DAEMON_MEMORY=DAEMON_MEMORY,
    )
    env.pop("SPARK_MASTER_OPTS", None)
    env.pop("SPARK_WORKER_OPTS", None)
    return env


def _spawn(root: Path, name: str, args: list[str]) -> subprocess.Popen[bytes]:
    spark_class = spark_home() / "bin" / "spark-class"
    if not spark_class.is_file():
        raise RuntimeError(f"no {spark_class}: is pyspark installed (make install)?")
    log = open(root / "logs" / f"{name}.log", "ab")  # noqa: SIM115 (the child holds it)
    try:
        return subprocess.Popen(
            [str(spark_class), *args],
            env=_env(root),
            cwd=root,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    finally:
        log.close()


def start(
    root: Path,
    *,
    workers: int = 2,
    cores: int = 1,
    memory: str = "1g",
    timeout_s: float = 90.0,
) -> LocalCluster:
    """Start a master and ``workers`` workers (each offering ``cores`` cores and ``memory``)
    on 127.0.0.1, logs and work directories under ``root``; return once every worker has
    registered. On failure everything started is stopped before the error is raised."""
    for sub in ("conf", "logs", "work"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    properties = root / "conf" / "spark-defaults.conf"
    properties.write_text(DAEMON_PROPERTIES)
    cluster = LocalCluster(root, free_port(), free_port())
    try:
        cluster.processes.append(
            _spawn(
                root,
                "master",
                [
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    LOOPBACK,
                    "--port",
                    str(cluster.port),
                    "--webui-port",
                    str(cluster.webui_port),
                    "--properties-file",
                    str(properties),
                ],
            )
        )
        deadline = time.monotonic() + timeout_s
        # Workers that register before the master is elected are ignored and retry only
        # after a back-off of several seconds: start them once the master is ALIVE.
        _wait(cluster, deadline, lambda: cluster.status() == "ALIVE", "the master to start")
        for index in range(1, workers + 1):
            work_dir = root / "work" / f"worker-{index}"
            work_dir.mkdir(parents=True, exist_ok=True)
            cluster.processes.append(
                _spawn(
                    root,
                    f"worker-{index}",
                    [
                        "org.apache.spark.deploy.worker.Worker",
                        cluster.master_url,
                        "--host",
                        LOOPBACK,
                        "--port",
                        "0",
                        "--webui-port",
                        "0",
                        "--cores",
                        str(cores),
                        "--memory",
                        memory,
                        "--work-dir",
                        str(work_dir),
                        "--properties-file",
                        str(properties),
                    ],
                )
            )
        _wait(
            cluster,
            deadline,
            lambda: cluster.alive_workers() >= workers,
            f"{workers} workers to register with {cluster.master_url}",
        )
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _wait(cluster: LocalCluster, deadline: float, done: Callable[[], bool], what: str) -> None:
    while not done():
        for process in cluster.processes:
            if process.poll() is not None:
                raise RuntimeError(
                    f"a Spark daemon exited with code {process.returncode} while starting "
                    f"(logs in {cluster.log_dir})"
                )
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what} (logs in {cluster.log_dir})")
        time.sleep(0.25)


@contextmanager
def running(
    root: Path, *, workers: int = 2, cores: int = 1, memory: str = "1g"
) -> Iterator[LocalCluster]:
    """:func:`start`, and :meth:`LocalCluster.stop` on the way out (also on an exception)."""
    cluster = start(root, workers=workers, cores=cores, memory=memory)
    try:
        yield cluster
    finally:
        cluster.stop()


def _demo_database(root: Path) -> str:
    """A seeded SQLite database for trying the cluster without a MariaDB (the executors open
    the same file: they share this machine's filesystem)."""
    path = root / "demo.db"
    url = f"sqlite:///{path}"
    if not path.exists():
        command = [sys.executable, "-m", "relay_pipeline", "seed", "--rows", "20000"]
        command += ["--days", "7", "--database-url", url, "--quiet"]
        subprocess.run(command, check=True)
    return url


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m relay_pipeline.localcluster",
        description="relay-pipeline report on a Spark standalone cluster on 127.0.0.1",
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cores", type=int, default=1, help="cores per worker")
    parser.add_argument("--memory", default="1g", help="memory per worker (its executor's)")
    parser.add_argument("--root", default=".relay/pipeline-cluster", help="logs, work dirs")
    parser.add_argument("--out", default="out/pipeline-cluster", help="the report's directory")
    parser.add_argument("--since", default="-7d")
    parser.add_argument("--until", default="now")
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL"))
    args = parser.parse_args(argv)

    root = Path(args.root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    database_url = args.database_url or _demo_database(root)
    out = str(Path(args.out).resolve())
    with running(root, workers=args.workers, cores=args.cores, memory=args.memory) as cluster:
        sys.stderr.write(
            f"cluster: master {cluster.master_url} (web UI http://{LOOPBACK}:"
            f"{cluster.webui_port}), {args.workers} workers × {args.cores} core × "
            f"{args.memory}; logs in {cluster.log_dir}\n"
        )
        command = [sys.executable, "-m", "relay_pipeline", "report", "--master"]
        command += [cluster.master_url, "--since", args.since, "--until", args.until]
        command += ["--out", out, "--database-url", database_url]
        env = {**os.environ, "SPARK_LOCAL_IP": LOOPBACK}
        code = subprocess.run(command, env=env, check=False).returncode
    sys.stderr.write("cluster: stopped\n")
    if code == 0:
        sys.stdout.write(f"report on the cluster: {out}/report.html (tables and summary.json)\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
