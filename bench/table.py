"""The results table: one row of it (``Row``, with its same-run ceiling and its verdict), the
helpers the rows of every scenario kind share, and the table's markdown rendering."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

# How a row's ``passed`` is set: ``None`` in smoke runs (no thresholds), else the verdict.
Judge = Callable[[Any], bool | None]


@dataclass
class Row:
    scenario: str
    metric: str
    measured: float | str | None
    unit: str = ""
    ceiling: float | None = None
    ceiling_name: str = ""
    target: str = ""
    passed: bool | None = None

    @property
    def ratio(self) -> float | None:
        if isinstance(self.measured, int | float) and self.ceiling:
            return round(self.measured / self.ceiling, 3)
        return None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"ratio": self.ratio}


def lookup(data: Any, *path: Any) -> Any:
    for key in path:
        if data is None:
            return None
        data = data[key] if isinstance(data, list) else data.get(key)
    return data


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 10 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def markdown(table: list[Row]) -> str:
    lines = [
        "| scenario | metric | measured | ceiling (same run) | ratio | target | pass |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in table:
        measured = f"{_fmt(row.measured)} {row.unit}".strip()
        ceiling = f"{_fmt(row.ceiling)} ({row.ceiling_name})" if row.ceiling else ""
        ratio = f"{row.ratio:.2f}" if row.ratio is not None else ""
        verdict = {True: "PASS", False: "FAIL", None: ""}[row.passed]
        lines.append(
            f"| {row.scenario} | {row.metric} | {measured} | {ceiling} | {ratio} | "
            f"{row.target} | {verdict} |"
        )
    return "\n".join(lines)
