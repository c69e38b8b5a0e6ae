"""Benchmark-only launchers, each one uvicorn worker configured like ``relay serve``.

``python -m bench.servers api``  the relay API (settings from the environment, as ``relay
                                 serve``) with database round trips counted (bench.dbcount)
``python -m bench.servers bare`` a bare FastAPI app with one endpoint: the HTTP ceiling
``python -m bench.servers consumer``  ``queue_consumer.main`` as is, with its database round
                                 trips and SQS / Redis / executor calls counted and written
                                 as JSON to ``BENCH_COUNTS_FILE`` when it exits

The HTTP servers bind 127.0.0.1 and take the port from ``PORT``. ``BENCH_EXPERIMENTS`` applies
proposed changes by monkeypatching (bench/experiments.py) for ``--experiment`` runs.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any


def _run(app: Any, port: int) -> None:
    import uvicorn

    # Same server options as `relay serve` (relay_api.cli.serve): one worker, uvicorn's
    # default loop and HTTP implementations, no access log, no proxy-header rewriting.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: None)
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        log_config=None,
        access_log=False,
        proxy_headers=False,
        timeout_graceful_shutdown=5,
    )


def api() -> None:
    from bench import dbcount, experiments, loopwatch

    dbcount.install()  # before the app builds its engine
    experiments.apply(experiments.enabled())  # before the routes are built

    from relay_api.app import create_app
    from relay_api.settings import ApiSettings
    from relay_core.logs import configure_logging

    settings = ApiSettings()
    configure_logging(settings.log_level)
    app = dbcount.CountingMiddleware(create_app(settings))
    _run(loopwatch.LoopWatchMiddleware(app), settings.port)


def bare() -> None:
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/bare", status_code=202)
    async def bare_endpoint() -> dict[str, str]:
        return {"status": "pending"}

    _run(app, int(os.environ["PORT"]))


def consumer() -> None:
    import atexit
    import json
    from pathlib import Path

    from bench import dbcount, experiments, iocount

    dbcount.install()
    iocount.install()
    experiments.apply(experiments.enabled())
    out = Path(os.environ["BENCH_COUNTS_FILE"])

    @atexit.register
    def _write_counts() -> None:
        counts = {"db": dbcount.COUNTS.snapshot()["round_trips"]["background"]}
        counts |= iocount.snapshot()
        out.write_text(json.dumps(counts))

    from queue_consumer.main import main

    sys.exit(main([]))


if __name__ == "__main__":
    {"api": api, "bare": bare, "consumer": consumer}[sys.argv[1]]()
