"""Charts as inline SVG (matplotlib, no network, no JavaScript): the page stays one file."""

from __future__ import annotations

import io
import re
from datetime import datetime
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.dates as mdates
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from relay_pipeline.history.lifecycle import STAGES

plt.rcParams.update(
    {
        "svg.fonttype": "none",  # text stays text: smaller, selectable
        "svg.hashsalt": "relay-pipeline",  # stable element ids: same data, same file
        "font.size": 9,
        "axes.spines.top": False,
        "axes.spines.right": False,
    }
)
COLORS = {"accepted": "#4c78a8", "confirmed": "#54a24b", "failed": "#e45756", "expired": "#f58518"}
PERCENTILE_COLORS = {"p50": "#4c78a8", "p95": "#f58518", "p99": "#e45756"}


def _svg(fig: Figure) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buffer.getvalue()
    text = re.sub(r"^.*?(?=<svg)", "", text, flags=re.S)
    return re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)


def _empty(fig: Figure, message: str) -> str:
    fig.text(0.5, 0.5, message, ha="center", va="center", color="#666")
    return _svg(fig)


def throughput_chart(points: list[dict[str, Any]]) -> str:
    fig, ax = plt.subplots(figsize=(9, 3.2))
    if not points:
        ax.set_axis_off()
        return _empty(fig, "no transactions in the window")
    hours = mdates.date2num([datetime.fromisoformat(p["hour"]) for p in points])
    for series in ("accepted", "confirmed", "failed", "expired"):
        values = [p[series] for p in points]
        ax.plot(hours, values, label=series, color=COLORS[series], linewidth=1.4)
    ax.set_ylabel("transactions / hour")
    ax.set_title("Throughput by accept hour (UTC)")
    ax.legend(loc="upper left", ncols=4, frameon=False)
    locator = mdates.AutoDateLocator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    ax.grid(axis="y", alpha=0.3)
    return _svg(fig)


def latency_chart(stages: dict[str, dict[str, Any]]) -> str:
    fig, ax = plt.subplots(figsize=(9, 3.4))
    names = [name for name, _, _ in STAGES]
    if not any(stages.get(name, {}).get("samples") for name in names):
        ax.set_axis_off()
        return _empty(fig, "no completed stages in the window")
    width = 0.27
    for offset, label in enumerate(PERCENTILE_COLORS):
        values = [(stages[name].get(f"{label}_ms") or 0) / 1000.0 for name in names]
        positions = [k + (offset - 1) * width for k in range(len(names))]
        ax.bar(positions, values, width, label=label, color=PERCENTILE_COLORS[label])
    ax.set_xticks(range(len(names)), [n.replace("_", " ") for n in names])
    ax.set_yscale("log")
    ax.set_ylabel("seconds (log)")
    ax.set_title("Latency percentiles per stage")
    ax.legend(frameon=False)
    ax.grid(axis="y", alpha=0.3)
    return _svg(fig)


def failure_chart(reasons: list[dict[str, Any]]) -> str:
    fig, ax = plt.subplots(figsize=(9, 0.5 + 0.4 * max(len(reasons), 1)))
    if not reasons:
        ax.set_axis_off()
        return _empty(fig, "no failures in the window")
    labels = [r["reason"] if len(r["reason"]) <= 60 else r["reason"][:57] + "…" for r in reasons]
    values = [r["transactions"] for r in reasons]
    ax.barh(range(len(reasons)), values, color=COLORS["failed"])
    ax.set_yticks(range(len(reasons)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("transactions")
    ax.set_title("Top failure reasons")
    ax.grid(axis="x", alpha=0.3)
    return _svg(fig)


def attempts_chart(histogram: dict[str, int]) -> str:
    fig, ax = plt.subplots(figsize=(5, 3))
    if not histogram:
        ax.set_axis_off()
        return _empty(fig, "no transactions in the window")
    keys = sorted(histogram, key=int)
    ax.bar(keys, [histogram[k] for k in keys], color=COLORS["accepted"])
    ax.set_yscale("log")
    ax.set_xlabel("executor attempts")
    ax.set_ylabel("transactions (log)")
    ax.set_title("Attempts per transaction")
    return _svg(fig)


SPEED_COLORS = {
    "safeLow": "#72b7b2",
    "average": "#4c78a8",
    "fast": "#f58518",
    "fastest": "#e45756",
    "n/a": "#b279a2",
}


def fee_chart(points: list[dict[str, Any]]) -> str:
    """Fees per hour stacked by speed, in ether (exact wei are in the tables)."""
    fig, ax = plt.subplots(figsize=(9, 3.2))
    if not points:
        ax.set_axis_off()
        return _empty(fig, "no fees paid in the window")
    hours = sorted({p["hour"] for p in points})
    index = {hour: k for k, hour in enumerate(hours)}
    speeds = [s for s in SPEED_COLORS if any(p["speed"] == s for p in points)]
    speeds += sorted({p["speed"] for p in points} - set(speeds))
    series = {speed: [0.0] * len(hours) for speed in speeds}
    for p in points:
        # Display only: a float is exact enough to draw; the tables hold the wei.
        series[p["speed"]][index[p["hour"]]] = int(p["fee_wei"] or 0) / 1e18
    x = mdates.date2num([datetime.fromisoformat(h) for h in hours])
    ax.stackplot(
        x,
        *(series[s] for s in speeds),
        labels=speeds,
        colors=[SPEED_COLORS.get(s, "#999999") for s in speeds],
        step="post",
        alpha=0.9,
    )
    ax.set_ylabel("ETH / hour")
    ax.set_title("Fees paid by accept hour (UTC), by speed")
    ax.legend(loc="upper left", ncols=len(speeds), frameon=False)
    locator = mdates.AutoDateLocator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    ax.grid(axis="y", alpha=0.3)
    return _svg(fig)
