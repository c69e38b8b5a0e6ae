"""``report.html``: one self-contained file (inline CSS and SVG; no scripts, no network)."""

from __future__ import annotations

from decimal import Decimal, localcontext
from html import escape
from typing import Any

from relay_pipeline.anomalies.job import subject
from relay_pipeline.report import charts

ANOMALY_ROWS = 100
WEI_PER_ETH = Decimal(10**18)


def _num(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return f"{value:,}" if isinstance(value, int) else escape(str(value))


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.2f} %"


def _eth(wei: str | None) -> str:
    """Wei (exact decimal text) as ether to six places; the exact figure on hover."""
    if wei is None:
        return '<span title="over 10^38 wei: not summed">overflow</span>'
    with localcontext() as context:
        context.prec = 80  # 10^38 wei and six places, exactly
        ether = (Decimal(wei) / WEI_PER_ETH).quantize(Decimal("0.000001"))
    return f'<span title="{escape(wei)} wei">{ether:,}</span>'


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
table.left td,table.left th{text-align:left}
.note{color:#666;font-size:12px}.warn{color:#b3261e}
table.nowrap th,table.nowrap td{white-space:nowrap}
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
            f"<code>{escape(subject(a))}</code>",
            escape(a["status"] or "–"),
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
{_costs_section(summary["costs"])}
<h2 id="anomalies">Anomalies</h2>
<p>{escape(anomaly_counts)}{
        " (first " + str(ANOMALY_ROWS) + " listed; all in anomalies/)"
        if len(anomalies["items"]) > ANOMALY_ROWS
        else ""
    }</p>
{
        _table(
            ["kind", "transaction or client, hour", "status", "age min", "detail"],
            anomaly_rows,
            "left",
        )
    }
<p class="meta">Per hour × type × speed × client tables are in the Parquet directories next to
this file; summary.json holds every number on this page.</p>
</body></html>
"""


def _costs_section(costs: dict[str, Any]) -> str:
    totals = costs["totals"]
    cards = [
        ("fees paid, ETH", _eth(totals["fee_wei"])),
        ("transactions with a fee", _num(totals["fee_transactions"])),
        ("gas used", _num(totals["gas_used"])),
        ("value moved, ETH", _eth(totals["value_wei"])),
    ]
    card_html = "".join(f'<div class="card">{escape(k)}<b>{v}</b></div>' for k, v in cards)
    client_rows = [
        [
            f"<code>{escape(c['client_id'])}</code>",
            _num(c["fee_transactions"]),
            _eth(c["fee_wei"]),
            _eth(c["fee_mean_wei"]) if c["fee_transactions"] else "–",
            _eth(c["fee_max_wei"]) if c["fee_transactions"] else "–",
            _num(c["gas_used"]),
            _num(c["value_transactions"]),
            _eth(c["value_wei"]),
        ]
        for c in costs["by_client"]
    ]
    relayers = sorted({r["relayer"] or "" for r in costs["relayer_spend"]})
    days: dict[str, dict[str, str | None]] = {}
    for r in costs["relayer_spend"]:
        days.setdefault(r["day"], {})[r["relayer"] or ""] = r["fee_wei"]
    spend_rows = [
        [
            escape(day),
            *(_eth(by_relayer[r]) if r in by_relayer else "–" for r in relayers),
            _eth(_sum_wei(by_relayer.values())),
        ]
        for day, by_relayer in sorted(days.items())
    ]
    unreadable = totals["amounts_unreadable"]
    warning = (
        f'<p class="warn">{unreadable:,} transactions hold a fee, gas price or value that is '
        "not a number below 10^38 wei: left out of every sum.</p>"
        if unreadable
        else ""
    )
    relayer_names = [escape(r) if r else "default relayer" for r in relayers]
    return f"""<h2 id="costs">Costs</h2>
<div class="cards">{card_html}</div>
{warning}
{
        _figure(
            "fees",
            "Fees paid per accept hour, by requested speed (gasless: n/a), in ETH.",
            charts.fee_chart(costs["fees_per_hour"]),
        )
    }
<h3>Fees and value moved per client, ETH</h3>
{
        _table(
            [
                "client",
                "paid a fee",
                "fees",
                "mean fee",
                "max fee",
                "gas used",
                "confirmed direct",
                "value moved",
            ],
            client_rows,
            "nowrap",
        )
    }
<h3>Relayer spend per day (UTC accept day), ETH</h3>
{_table(["day", *relayer_names, "total"], spend_rows, "nowrap")}
<p class="note">1 ETH = 10^18 wei; hover a figure for its exact wei. Exact wei per hour, type,
speed and client in fees_hourly/, per client in client_costs/, per relayer and day in
relayer_spend/.</p>"""


def _sum_wei(amounts: Any) -> str | None:
    total = 0
    for amount in amounts:
        if amount is None:
            return None  # a part overflowed: so does the total
        total += int(amount)
    return str(total)
