"""``report.html``: one self-contained file (inline CSS and SVG; no scripts, no network)."""

from __future__ import annotations

from html import escape
from typing import Any

from relay_pipeline.report import charts

ANOMALY_ROWS = 100


def _num(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return f"{value:,}" if isinstance(value, int) else escape(str(value))


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.2f} %"


def _table(headers: list[str], rows: list[list[str]], css: str = "") -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _figure(chart_id: str, caption: str, svg: str) -> str:
    return (
        f'<figure id="chart-{chart_id}" class="chart">{svg}'
        f"<figcaption>{escape(caption)}</figcaption></figure>"
    )


STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;
max-width:1100px;color:#222;padding:0 1rem}
h1{font-size:1.5rem;margin-bottom:.2rem}h2{font-size:1.15rem;margin-top:2rem;
border-bottom:1px solid #ddd;padding-bottom:.2rem}
.meta{color:#666}.cards{display:flex;flex-wrap:wrap;gap:.6rem;margin:1rem 0}
.card{border:1px solid #ddd;border-radius:6px;padding:.5rem .9rem;min-width:7.5rem}
.card b{display:block;font-size:1.3rem}
table{border-collapse:collapse;margin:.5rem 0;font-size:13px}
th,td{border-bottom:1px solid #eee;padding:.25rem .6rem;text-align:right}
th{background:#f6f6f6}td:first-child,th:first-child{text-align:left}
table.left td{text-align:left}
figure{margin:1rem 0}figure svg{max-width:100%;height:auto}
figcaption{color:#666;font-size:12px}code{font-size:12px}
"""


def render(summary: dict[str, Any]) -> str:
    totals = summary["totals"]
    stages = summary["stage_latency_ms"]
    reasons = summary["top_failure_reasons"]
    anomalies = summary["anomalies"]
    cards = [
        ("accepted", _num(totals["accepted"])),
        ("submitted", _num(totals["submitted"])),
        ("confirmed", _num(totals["confirmed"])),
        ("failed", _num(totals["failed"])),
        ("expired", _num(totals["expired"])),
        ("dead-lettered", _num(totals["dead_lettered"])),
        ("success rate", _pct(totals["success_rate"])),
        ("anomalies", _num(sum(anomalies["counts"].values()))),
    ]
    card_html = "".join(f'<div class="card">{escape(k)}<b>{v}</b></div>' for k, v in cards)
    stage_rows = [
        [
            escape(name.replace("_", " ")),
            _num(values["samples"]),
            *(_num(values.get(f"{p}_ms")) for p in ("p50", "p95", "p99")),
        ]
        for name, values in stages.items()
    ]
    reason_rows = [[str(r["rank"]), escape(r["reason"]), _num(r["transactions"])] for r in reasons]
    client_rows = [
        [
            f"<code>{escape(c['client_id'])}</code>",
            _num(c["accepted"]),
            _num(c["confirmed"]),
            _num(c["failed"]),
            _num(c["expired"]),
            _num(c["dead_lettered"]),
            _pct(c["success_rate"]),
        ]
        for c in summary["by_client"]
    ]
    anomaly_rows = [
        [
            escape(a["kind"]),
            f"<code>{escape(a['transaction_id'])}</code>",
            escape(a["status"]),
            _num(a["age_minutes"]),
            escape(a["detail"] or ""),
        ]
        for a in anomalies["items"][:ANOMALY_ROWS]
    ]
    anomaly_counts = ", ".join(f"{k}: {v:,}" for k, v in anomalies["counts"].items()) or "none"
    window = summary["window"]
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Relay SLA report {escape(window["since"])} – {escape(window["until"])}</title>
<style>{STYLE}</style></head>
<body>
<h1>Relay SLA report</h1>
<p class="meta">Transactions accepted in [{escape(window["since"])}, {escape(window["until"])})
UTC · generated {escape(summary["generated_at"])} · input: {
        escape(summary["inputs"]["describe"])
    }</p>
<div class="cards">{card_html}</div>
<h2>Throughput</h2>
{
        _figure(
            "throughput",
            "Accepted, confirmed, failed and expired per accept hour.",
            charts.throughput_chart(summary["throughput_per_hour"]),
        )
    }
<h2>Latency per stage</h2>
{_figure("latency", "p50 / p95 / p99 of each stage (nearest rank).", charts.latency_chart(stages))}
{_table(["stage", "samples", "p50 ms", "p95 ms", "p99 ms"], stage_rows)}
<h2>Failures</h2>
{
        _figure(
            "failures",
            "Most frequent reasons of failed and expired transactions.",
            charts.failure_chart(reasons),
        )
    }
{_table(["#", "reason", "transactions"], reason_rows)}
<h2>Attempts</h2>
{
        _figure(
            "attempts",
            "Executor attempts per transaction.",
            charts.attempts_chart(summary["attempts_histogram"]),
        )
    }
<h2>Clients</h2>
{
        _table(
            [
                "client",
                "accepted",
                "confirmed",
                "failed",
                "expired",
                "dead-lettered",
                "success rate",
            ],
            client_rows,
        )
    }
<h2 id="anomalies">Anomalies</h2>
<p>{escape(anomaly_counts)}{
        " (first " + str(ANOMALY_ROWS) + " listed; all in anomalies/)"
        if len(anomalies["items"]) > ANOMALY_ROWS
        else ""
    }</p>
{_table(["kind", "transaction", "status", "age min", "detail"], anomaly_rows, "left")}
<p class="meta">Per hour × type × speed × client tables are in the Parquet directories next to
this file; summary.json holds every number on this page.</p>
</body></html>
"""
