"""Log lines: JSON for machines, one readable line an event at a developer's terminal."""

from __future__ import annotations

import io
import json
import logging

import pytest

from relay_core.logs import ConsoleFormatter, JsonFormatter, console_wanted


def _record(**extra: object) -> logging.LogRecord:
    record = logging.makeLogRecord(
        {"name": "queue_consumer.worker", "levelno": logging.WARNING, "levelname": "WARNING"}
    )
    record.msg = "consumer.circuit.opened"
    record.__dict__.update(extra)
    return record


def test_a_console_line_reads_as_one_event_with_its_context() -> None:
    line = ConsoleFormatter().format(_record(transactionId="tx-1", reason="a b", attempts=3))
    assert line.endswith(
        "queue_consumer warning consumer.circuit.opened  transactionId=tx-1 reason='a b' attempts=3"
    )
    assert "\n" not in line


def test_the_json_line_carries_the_same_event() -> None:
    entry = json.loads(JsonFormatter().format(_record(transactionId="tx-1")))
    assert entry["event"] == "consumer.circuit.opened"
    assert entry["transactionId"] == "tx-1"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("environment", "stream", "console"),
    [
        ("dev", _Terminal(), True),
        ("dev", io.StringIO(), False),  # piped to a file or a collector: JSON
        ("production", _Terminal(), False),  # production is JSON, always
        (None, _Terminal(), False),
    ],
)
def test_readable_lines_only_for_a_developer_at_a_terminal(
    monkeypatch: pytest.MonkeyPatch, environment: str | None, stream: io.StringIO, console: bool
) -> None:
    if environment is None:
        monkeypatch.delenv("RELAY_ENV", raising=False)
    else:
        monkeypatch.setenv("RELAY_ENV", environment)
    assert console_wanted(stream) is console
