"""Logs on stdout: JSON lines, one event each. Event names are dotted snake case; context goes
in ``extra``.

At a terminal under ``RELAY_ENV=dev`` (``make run``) each event is one readable line instead
(time, service, level when not info, event, its context as ``key=value``), so five processes
sharing a terminal stay legible; JSON everywhere else, and always in production.
"""

from __future__ import annotations

import logging
import os
import sys
from datetime import UTC, datetime
from typing import Any

import orjson

from relay_core.tracing import TraceLogFilter

_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info and record.exc_info[0] is not None:
            # The exception type and message only: a stack trace can carry request data.
            entry["error"] = f"{record.exc_info[0].__name__}: {record.exc_info[1]}"
        return orjson.dumps(entry, default=str).decode()


class ConsoleFormatter(logging.Formatter):
    """One readable line an event, for a developer's terminal."""

    def format(self, record: logging.LogRecord) -> str:
        moment = datetime.fromtimestamp(record.created).strftime("%H:%M:%S.%f")[:-3]
        service = record.name.split(".", 1)[0]
        level = "" if record.levelno == logging.INFO else f"{record.levelname.lower()} "
        context = " ".join(
            f"{key}={_console_value(value)}"
            for key, value in record.__dict__.items()
            if key not in _STANDARD and not key.startswith("_") and value is not None
        )
        line = f"{moment} {service:<14} {level}{record.getMessage()}"
        if context:
            line = f"{line}  {context}"
        if record.exc_info and record.exc_info[0] is not None:
            line = f"{line}  error={record.exc_info[0].__name__}: {record.exc_info[1]}"
        return line


def _console_value(value: Any) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
    return text if text and " " not in text else repr(text)


def console_wanted(stream: Any = None) -> bool:
    """Readable lines only for a developer at a terminal (``RELAY_ENV=dev``)."""
    stream = sys.stdout if stream is None else stream
    return os.environ.get("RELAY_ENV") == "dev" and bool(getattr(stream, "isatty", bool)())


def configure_logging(level: str = "INFO") -> None:
    # Nothing of these goes into a line (JsonFormatter): not looked up for every record (the
    # logging HOWTO's "Optimization": the caller's frame walk above all).
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(ConsoleFormatter() if console_wanted() else JsonFormatter())
    handler.addFilter(TraceLogFilter())  # requestId and traceId on lines written under a trace
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("botocore", "aiobotocore", "urllib3", "asyncio", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
