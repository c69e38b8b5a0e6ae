"""A half-open time window ``[since, until)`` over naive-UTC ``created_at``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def parse_duration(text: str) -> timedelta:
    """``30d``, ``12h``, ``15m``, ``90s``, ``2w``."""
    match = _DURATION.fullmatch(text)
    if not match:
        raise ValueError(f"not a duration: {text!r} (use e.g. 30d, 12h, 15m)")
    return timedelta(**{_UNITS[match.group(2)]: float(match.group(1))})


def parse_instant(text: str, *, now: datetime | None = None) -> datetime:
    """An ISO date/time (naive = UTC; an offset is converted to UTC) or ``now`` / ``-7d``."""
    now = now or utcnow()
    text = text.strip()
    if text == "now":
        return now
    if text.startswith("-"):
        return now - parse_duration(text[1:])
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return moment


def sql_timestamp(moment: datetime) -> str:
    """The literal both MySQL DATETIME(6) and SQLite's stored text compare correctly against."""
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")


@dataclass(frozen=True)
class Window:
    since: datetime
    until: datetime

    def __post_init__(self) -> None:
        if self.until <= self.since:
            raise ValueError(f"empty window: since {self.since} is not before until {self.until}")

    def slices(self, count: int) -> list[tuple[datetime, datetime]]:
        """``count`` contiguous sub-windows covering the window exactly."""
        step = (self.until - self.since) / count
        bounds = [self.since + step * k for k in range(count)] + [self.until]
        return [(bounds[k], bounds[k + 1]) for k in range(count) if bounds[k] < bounds[k + 1]]

    def predicates(self, column: str, count: int) -> list[str]:
        """One WHERE clause per JDBC partition: each reads one time slice through the index."""
        return [
            f"{column} >= '{sql_timestamp(lo)}' AND {column} < '{sql_timestamp(hi)}'"
            for lo, hi in self.slices(count)
        ]

    def describe(self) -> str:
        return f"[{self.since.isoformat(sep=' ')}, {self.until.isoformat(sep=' ')})"
