"""The ``relay-pipeline`` command.

relay-pipeline report    --since T --until T --out DIR [--archive PATH]   SLA report + anomalies
relay-pipeline anomalies [--since T --until T] [--out DIR]                 anomaly scan alone
relay-pipeline archive   --older-than 30d --out PATH                        DB → Parquet, verified
relay-pipeline seed      --rows N [--days D]                                synthetic history
relay-pipeline reconcile --rpc-url URL [--since T --until T] [--sample N]   rows vs receipts

Every command takes --database-url (a SQLAlchemy URL; default: DATABASE_URL), --master and
--conf KEY=VALUE (Spark), and runs on local[*] unless told otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from relay_pipeline.database import Database, database_from_url
from relay_pipeline.reconcile import command as reconcile_command
from relay_pipeline.settings import PipelineSettings

EXIT_MISMATCH = 3
EXIT_VERIFY = 4
EXIT_LOCKED = 5
EXIT_ANOMALIES = 2


def _out(line: str = "") -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _err(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _conf_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        help="SQLAlchemy URL (mysql://user:pass@host:3306/db or sqlite:///path); "
        "default: DATABASE_URL",
    )
    parser.add_argument("--master", help="Spark master (default local[*]; yarn, k8s://…)")
    parser.add_argument(
        "--conf",
        action="append",
        type=_conf_pair,
        default=[],
        metavar="KEY=VALUE",
        help="Spark configuration, repeatable (e.g. spark.driver.memory=4g)",
    )
    parser.add_argument("--jdbc-partitions", type=int, help="parallel JDBC reads per table")
    parser.add_argument("--quiet", action="store_true", help="no progress display")


def _window_args(parser: argparse.ArgumentParser, default_since: str) -> None:
    parser.add_argument(
        "--since",
        default=default_since,
        help=f"window start, ISO time (UTC) or -7d (default {default_since})",
    )
    parser.add_argument("--until", default="now", help="window end, exclusive (default now)")
    parser.add_argument(
        "--now", help="the moment anomaly ages are measured from (default: the current time)"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="relay-pipeline", description="Relay data pipeline (PySpark)"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    report = sub.add_parser("report", help="SLA report: Parquet tables, summary.json, report.html")
    _window_args(report, "-1d")
    report.add_argument("--out", required=True, help="output directory (local, hdfs://, s3a://)")
    report.add_argument(
        "--archive", help="also read the Parquet archive at this path (history already moved)"
    )
    report.add_argument(
        "--archive-only", action="store_true", help="read the archive alone, not the database"
    )
    _common(report)

    anomalies = sub.add_parser("anomalies", help="list transactions that need an operator")
    _window_args(anomalies, "-1d")
    anomalies.add_argument("--out", help="also write anomalies/ (Parquet) and anomalies.json")
    anomalies.add_argument(
        "--fail-on-found", action="store_true", help=f"exit {EXIT_ANOMALIES} if any were found"
    )
    _common(anomalies)

    archive = sub.add_parser(
        "archive", help="move finished history into a verified Parquet archive"
    )
    archive.add_argument(
        "--older-than", default="30d", help="finished (last updated) longer ago than this"
    )
    archive.add_argument("--out", required=True, help="archive root (local, hdfs://, s3a://)")
    archive.add_argument("--batch-size", type=int, help="transactions deleted per DB transaction")
    _common(archive)

    seed = sub.add_parser("seed", help="write synthetic history (for trying out and benchmarks)")
    seed.add_argument("--rows", type=int, required=True, help="transactions to create")
    seed.add_argument("--days", type=float, default=30.0, help="spread over this many days")
    seed.add_argument("--end", default="now", help="history ends here (default now)")
    seed.add_argument("--clients", type=int, default=12)
    seed.add_argument("--seed", type=int, default=1, help="random seed (same seed, same data)")
    seed.add_argument(
        "--anomaly-rate", type=float, default=0.0005, help="share of rows left stuck or broken"
    )
    seed.add_argument(
        "--no-migrate",
        action="store_true",
        help="do not run the schema migrations first (they are idempotent)",
    )
    seed.add_argument("--database-url", help="SQLAlchemy URL; default: DATABASE_URL")
    seed.add_argument("--quiet", action="store_true")
    reconcile_command.add_parser(sub)
    return parser


def _settings(args: argparse.Namespace) -> PipelineSettings:
    overrides: dict[str, Any] = {}
    if getattr(args, "database_url", None):
        overrides["database_url"] = args.database_url
    if getattr(args, "master", None):
        overrides["spark_master"] = args.master
    if getattr(args, "jdbc_partitions", None):
        overrides["jdbc_partitions"] = args.jdbc_partitions
    return PipelineSettings(**overrides)


def _spark(settings: PipelineSettings, args: argparse.Namespace, db: Database | None) -> Any:
    from relay_pipeline.spark import build_session, check_dependencies

    check_dependencies(settings, db.driver if db is not None else None)

    return build_session(settings, app_name=f"relay-pipeline {args.command}", conf=dict(args.conf))


def _thresholds(settings: PipelineSettings) -> Any:
    from relay_pipeline.report.job import default_thresholds

    return default_thresholds(
        settings.enqueue_grace_min,
        settings.queue_visibility_timeout_s,
        settings.processing_grace_s,
        settings.stale_inflight_min,
        fee_spike_factor=settings.fee_spike_factor,
        fee_spike_min_hours=settings.fee_spike_min_hours,
    )


def _cmd_report(args: argparse.Namespace) -> int:
    from relay_pipeline.history.repository import ArchiveReader, JdbcReader
    from relay_pipeline.history.window import Window, parse_instant, utcnow
    from relay_pipeline.progress import Progress
    from relay_pipeline.report.job import STEPS, ReportRequest, run_report

    settings = _settings(args)
    now = parse_instant(args.now) if args.now else utcnow()
    window = Window(parse_instant(args.since, now=now), parse_instant(args.until, now=now))
    if args.archive_only and not args.archive:
        raise SystemExit("--archive-only needs --archive PATH")
    db = None if args.archive_only else database_from_url(settings.database_url)
    spark = _spark(settings, args, db)
    jdbc = (
        JdbcReader(spark, db, settings.jdbc_partitions, settings.jdbc_fetch_size)
        if db is not None
        else None
    )
    archive = ArchiveReader(spark, args.archive) if args.archive else None
    request = ReportRequest(
        window=window,
        out_dir=args.out,
        now=now,
        thresholds=_thresholds(settings),
        anomaly_limit=settings.anomaly_limit,
    )
    with Progress(spark.sparkContext, total_steps=STEPS, enabled=not args.quiet) as progress:
        progress.note(f"report {window.describe()} from {_inputs(db, args)} → {request.out_dir}")
        summary = run_report(spark, jdbc, archive, request, progress)
    totals = summary["totals"]
    rate = totals["success_rate"]
    _out(
        f"report: {totals['accepted']:,} accepted, {totals['confirmed']:,} confirmed, "
        f"{totals['failed']:,} failed, {totals['expired']:,} expired, "
        f"success rate {'n/a' if rate is None else f'{rate * 100:.2f} %'}, "
        f"{sum(summary['anomalies']['counts'].values()):,} anomalies "
        f"({summary['elapsed_s']} s)"
    )
    _out(f"report: {args.out.rstrip('/')}/report.html")
    return 0


def _inputs(db: Database | None, args: argparse.Namespace) -> str:
    parts = [db.display] if db is not None else []
    if getattr(args, "archive", None):
        parts.append(f"archive {args.archive}")
    return " + ".join(parts)


def _cmd_anomalies(args: argparse.Namespace) -> int:
    from relay_pipeline.anomalies.job import (
        find_anomalies,
        subject,
        write_anomalies,
        write_anomaly_json,
    )
    from relay_pipeline.history.lifecycle import lifecycles
    from relay_pipeline.history.repository import JdbcReader
    from relay_pipeline.history.window import Window, parse_instant, utcnow
    from relay_pipeline.progress import Progress
    from relay_pipeline.storage import Storage

    settings = _settings(args)
    now = parse_instant(args.now) if args.now else utcnow()
    window = Window(parse_instant(args.since, now=now), parse_instant(args.until, now=now))
    db = database_from_url(settings.database_url)
    spark = _spark(settings, args, db)
    jdbc = JdbcReader(spark, db, settings.jdbc_partitions, settings.jdbc_fetch_size)
    with (
        Progress(spark.sparkContext, total_steps=1, enabled=not args.quiet) as progress,
        progress.step(
            f"anomaly scan of {db.display}, window {window.describe()} and every open transaction"
        ),
    ):
        found = find_anomalies(
            lifecycles(jdbc.transactions(window), jdbc.events(window)),
            jdbc,
            window,
            now,
            _thresholds(settings),
        )
        if args.out:
            storage = Storage(spark)
            result = write_anomalies(found, storage, args.out, settings.anomaly_limit)
            write_anomaly_json(
                storage,
                args.out,
                result,
                {
                    "window": {"since": str(window.since), "until": str(window.until)},
                    "now": str(now),
                },
            )
            rows = result.items
            counts = result.counts
        else:
            collected = found.orderBy("kind", "created_at").limit(settings.anomaly_limit)
            rows = [item.asDict() for item in collected.collect()]
            counts = {
                kind_row["kind"]: int(kind_row["count"])
                for kind_row in found.groupBy("kind").count().collect()
            }
    _out(f"{'kind':17} {'transaction':36} {'status':10} {'age min':>9}  detail")
    for item in rows:
        _out(
            f"{item['kind']:17} {subject(item):36} {item['status'] or '-':10} "
            f"{item['age_minutes']:>9.1f}  {item['detail']}"
        )
    total = sum(counts.values())
    by_kind = ", ".join(f"{kind}: {n:,}" for kind, n in sorted(counts.items())) or "none"
    _out(f"anomalies: {total:,} ({by_kind})")
    return EXIT_ANOMALIES if args.fail_on_found and total else 0


def _cmd_archive(args: argparse.Namespace) -> int:
    from relay_pipeline.archive.job import ArchiveRequest, ArchiveVerificationError, run_archive
    from relay_pipeline.archive.repository import ArchiveLocked
    from relay_pipeline.history.window import parse_duration, utcnow
    from relay_pipeline.progress import Progress

    settings = _settings(args)
    db = database_from_url(settings.database_url)
    cutoff = utcnow() - parse_duration(args.older_than)
    spark = _spark(settings, args, db)
    request = ArchiveRequest(
        out=args.out,
        cutoff=cutoff,
        batch_size=args.batch_size or settings.archive_delete_batch,
        partitions=settings.jdbc_partitions,
        fetch_size=settings.jdbc_fetch_size,
    )
    with Progress(spark.sparkContext, total_steps=0, enabled=not args.quiet) as progress:
        try:
            result = run_archive(spark, db, request, note=progress.note)
        except ArchiveLocked as exc:
            _err(f"archive: {exc}")
            return EXIT_LOCKED
        except ArchiveVerificationError as exc:
            _err(f"archive: verification failed, nothing published or deleted: {exc}")
            return EXIT_VERIFY
    _out(json.dumps(result.as_dict(), indent=2, default=str))
    return EXIT_MISMATCH if result.mismatched else 0


def _cmd_seed(args: argparse.Namespace) -> int:
    from relay_pipeline.database import upgrade_schema
    from relay_pipeline.history.window import parse_instant
    from relay_pipeline.seed.service import seed_history

    settings = _settings(args)
    db = database_from_url(settings.database_url)
    if not args.no_migrate:
        upgrade_schema(settings.database_url)
    end = parse_instant(args.end).replace(microsecond=0)
    result = seed_history(
        db,
        rows=args.rows,
        start=end - timedelta(days=args.days),
        end=end,
        clients=args.clients,
        seed=args.seed,
        anomaly_rate=args.anomaly_rate,
        report=(lambda _line: None) if args.quiet else _err,
    )
    _out(
        f"seed: {result.transactions:,} transactions and {result.events:,} events into "
        f"{db.display} in {result.seconds:.1f} s (history {end - timedelta(days=args.days)} "
        f"→ {end})"
    )
    return 0


COMMANDS = {
    "report": _cmd_report,
    "anomalies": _cmd_anomalies,
    "archive": _cmd_archive,
    "seed": _cmd_seed,
    "reconcile": reconcile_command.run,
}


# Options whose value may be a relative time such as -7d, which argparse would otherwise take
# for an option of its own ("expected one argument").
RELATIVE_TIME_OPTIONS = ("--since", "--until", "--now")


def _attach_relative_times(argv: Sequence[str]) -> list[str]:
    """``--since -7d`` → ``--since=-7d``."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1] in RELATIVE_TIME_OPTIONS and arg.startswith("-") and arg[1:2].isdigit():
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(_attach_relative_times(sys.argv[1:] if argv is None else argv))
    try:
        return COMMANDS[args.command](args)
    except ValueError as exc:
        _err(f"relay-pipeline: {exc}")
        return 2
