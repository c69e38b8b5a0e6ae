"""What every ``relay`` command shares: output, argument types, the settings (with what a
running ``make run`` chose), and the plain message and exit code for a failure an operator
can fix. Light on purpose: each command imports what it needs when it runs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from relay_api import devstate
from relay_api.exitcodes import EXIT_UNREACHABLE, EXIT_USAGE
from relay_api.limits.bounds import MAX_RATE_PER_S, MIN_RATE_PER_S

if TYPE_CHECKING:
    from relay_api.settings import ApiSettings

LANES = ("normal", "fast")  # relay_core.controls.LANES, without importing the database layer

# A command: what it runs with the parsed arguments, returning the exit code.
Handler = Callable[[argparse.Namespace], int]


def out(line: str = "") -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def err(line: str) -> None:
    sys.stderr.write(line + "\n")


def settings() -> ApiSettings:
    """The API's settings from the environment, completed by a running ``make run``'s
    endpoints (relay_api.devstate) where the environment says nothing."""
    devstate.adopt()
    from relay_api.settings import ApiSettings

    return ApiSettings()


def with_settings(
    command: Callable[[ApiSettings, argparse.Namespace], Coroutine[Any, Any, int]],
) -> Handler:
    """A handler running ``command`` (async, given the settings) and turning what an
    operator can fix into a plain message and its exit code."""

    def handle(args: argparse.Namespace) -> int:
        import asyncio

        current = settings()
        try:
            return asyncio.run(command(current, args))
        except Exception as exc:
            code = failure(exc, current)
            if code is None:
                raise
            return code

    return handle


def failure(exc: Exception, current: ApiSettings) -> int | None:
    """The exit code and a plain message for what an operator can fix (a database or SQS
    out of reach, a database without its schema); None for a bug, which keeps its traceback."""
    from botocore.exceptions import BotoCoreError
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import DBAPIError

    where = make_url(current.database_url).render_as_string(hide_password=True)
    if isinstance(exc, DBAPIError):
        text = str(exc.orig)
        if "no such table" in text or "doesn't exist" in text:
            err(f"the database at {where} has no schema yet: run `relay db upgrade` first")
            return EXIT_USAGE
        err(f"cannot use the database at {where} (DATABASE_URL): {text[:300]}")
        return EXIT_UNREACHABLE
    if isinstance(exc, BotoCoreError | ConnectionError):
        err(f"cannot reach SQS or the database: {str(exc)[:300]}")
        return EXIT_UNREACHABLE
    return None


def rate(text: str) -> float:
    value = float(text)
    if not MIN_RATE_PER_S <= value <= MAX_RATE_PER_S:
        raise argparse.ArgumentTypeError(f"must be between {MIN_RATE_PER_S:g} and {MAX_RATE_PER_S}")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value
