"""``relay serve`` (the API; ``relay-api`` is the same, what the container runs) and
``relay dev`` (the whole system locally: ``make run``)."""

from __future__ import annotations

import argparse
import signal
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from relay_api.cli.common import err
from relay_api.exitcodes import EXIT_USAGE

if TYPE_CHECKING:
    from relay_api.settings import ApiSettings


def add_parsers(sub: Any) -> None:
    sub.add_parser("serve", help="run the API server").set_defaults(
        handler=lambda args: serve(_own_settings())
    )
    sub.add_parser("dev", help="run the whole system locally (make run)").set_defaults(handler=_dev)


def _own_settings() -> ApiSettings:
    # A server takes its settings from its environment alone, never from a make run nearby.
    from relay_api.settings import ApiSettings

    return ApiSettings()


def _dev(args: argparse.Namespace) -> int:
    try:
        from relay_api.devserver import run
    except ModuleNotFoundError as exc:
        if exc.name is None or not exc.name.startswith("relay_devstack"):
            raise
        # A service image carries no development stack (libs/relay-devstack).
        err("relay dev needs the development stack (relay-devstack): run `make run` in a checkout")
        return EXIT_USAGE
    return run()


def serve(settings: ApiSettings) -> int:
    import uvicorn

    from relay_api.app import create_app
    from relay_core.logs import configure_logging

    configure_logging(settings.log_level)
    settings.check_production_secrets()
    # uvicorn drains on SIGTERM/SIGINT and then re-raises the signal against the handlers it
    # found at start. Ignoring it there turns a completed graceful shutdown into exit code 0.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: None)
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
        # The caller's address is Relay's to decide (RELAY_TRUST_FORWARDED_FOR, client_address):
        # uvicorn's own X-Forwarded-For rewriting (trusting 127.0.0.1 by default) would let a
        # local client choose the address its unauthenticated requests are limited by, and it
        # cost CPU on every request.
        proxy_headers=False,
        timeout_graceful_shutdown=20,
    )
    return 0


def serve_main(argv: Sequence[str] | None = None) -> None:
    """``relay-api``: the API server alone (what the container runs); ``relay serve`` too."""
    argparse.ArgumentParser(
        prog="relay-api",
        description="Run the Relay HTTP API (uvicorn, one worker) on HOST:PORT "
        "(127.0.0.1:8000). Configured by the environment: docs/configuration.md.",
    ).parse_args(argv)
    serve(_own_settings())
