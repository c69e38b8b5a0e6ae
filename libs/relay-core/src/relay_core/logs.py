"""JSON logs on stdout. Event names are dotted snake case; context goes in ``extra``."""

from __future__ import annotations

import logging
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


def configure_logging(level: str = "INFO") -> None:
    # Nothing of these goes into a line (JsonFormatter): not looked up for every record (the
    # logging HOWTO's "Optimization": the caller's frame walk above all).
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(TraceLogFilter())  # requestId and traceId on lines written under a trace
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("botocore", "aiobotocore", "urllib3", "asyncio", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
