"""``relayer-stub``: run the stub (uvicorn, one worker). SIGTERM and Ctrl-C stop it cleanly:
in-flight requests get ``STUB_GRACEFUL_SHUTDOWN_S``, then the ledger is flushed and closed."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from types import FrameType

from pydantic import ValidationError

from relay_core.logs import configure_logging
from relayer_stub.settings import StubSettings


def _stopped_by(sig: int, _: FrameType | None) -> None:
    """After a graceful stop uvicorn re-raises the signal it caught; with this handler in place
    that is a no-op, so a SIGTERM or Ctrl-C ends the process with status 0."""


def settings_problems(exc: ValidationError) -> str:
    """One line per problem, without the values given: pydantic's own message quotes its input,
    which holds the private keys."""
    return "\n".join(
        f"  {'.'.join(str(part) for part in error['loc']) or 'settings'}: {error['msg']}"
        for error in exc.errors(include_input=False, include_url=False)
    )


def main(argv: Sequence[str] | None = None) -> int:
    argparse.ArgumentParser(
        prog="relayer-stub",
        description="Run the relayer-stub: an executor speaking the OpenZeppelin Relayer API "
        "for development and tests, on STUB_HOST:STUB_PORT (127.0.0.1:8080). Configured by "
        "STUB_* variables (services/relayer-stub/README.md); exits 2 on invalid settings.",
    ).parse_args(argv)
    try:
        settings = StubSettings()
    except ValidationError as exc:
        sys.stderr.write(f"relayer-stub: invalid settings\n{settings_problems(exc)}\n")
        return 2
    configure_logging(settings.log_level)

    import uvicorn

    from relayer_stub.app import create_app

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stopped_by)
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        workers=1,
        log_config=None,
        access_log=False,
        backlog=4096,
        timeout_graceful_shutdown=settings.graceful_shutdown_s,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
