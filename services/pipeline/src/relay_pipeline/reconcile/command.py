"""``relay-pipeline reconcile``: the window's confirmed transactions against the chain's
receipts. Exit 0 when every one matches, 2 when any differs (each listed), 1 when the node
cannot be asked. No Spark: the rows are read page by page over DB-API and the receipts in
JSON-RPC batches."""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
from typing import Any

EXIT_MISMATCHES = 2
EXIT_RPC = 1


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "reconcile", help="check confirmed transactions against their receipts on chain"
    )
    parser.add_argument(
        "--rpc-url",
        default=os.environ.get("RELAY_CHAIN_RPC_URL"),
        help="the chain's JSON-RPC endpoint (default: RELAY_CHAIN_RPC_URL)",
    )
    parser.add_argument("--since", default="-1d", help="window start over created_at (-1d)")
    parser.add_argument("--until", default="now", help="window end, exclusive (default now)")
    parser.add_argument("--sample", type=int, help="check a random N of the window's rows")
    parser.add_argument(
        "--seed", type=int, help="the sample's random seed (default: drawn, and printed)"
    )
    parser.add_argument(
        "--batch-size", type=int, default=100, help="receipts per JSON-RPC batch request (100)"
    )
    parser.add_argument(
        "--concurrency", type=int, default=4, help="batch requests in flight at a time (4)"
    )
    parser.add_argument("--database-url", help="SQLAlchemy URL; default: DATABASE_URL")
    parser.add_argument("--quiet", action="store_true", help="no progress display")


def run(args: argparse.Namespace) -> int:
    from relay_pipeline.database import database_from_url
    from relay_pipeline.history.window import Window, parse_instant, utcnow
    from relay_pipeline.progress import Progress
    from relay_pipeline.reconcile import repository, service
    from relay_pipeline.reconcile.rpc import JsonRpcReceipts, RpcFailure
    from relay_pipeline.settings import PipelineSettings

    if not args.rpc_url:
        raise ValueError("reconcile needs --rpc-url (or RELAY_CHAIN_RPC_URL)")
    if args.sample is not None and args.sample < 1:
        raise ValueError("--sample must be at least 1")
    settings = (
        PipelineSettings(database_url=args.database_url)
        if args.database_url
        else PipelineSettings()
    )
    db = database_from_url(settings.database_url)
    now = utcnow()
    window = Window(parse_instant(args.since, now=now), parse_instant(args.until, now=now))
    began = time.monotonic()
    total = repository.count_confirmed(db, window)
    rows: Any = repository.confirmed(db, window)
    what = f"{total:,} confirmed transactions"
    if args.sample is not None and args.sample < total:
        seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
        rows = service.sample(rows, args.sample, seed)
        what = f"a sample of {len(rows):,} of {total:,} confirmed transactions (--seed {seed})"
        total = len(rows)
    with (
        Progress(None, total_steps=1, enabled=not args.quiet) as progress,
        JsonRpcReceipts(
            args.rpc_url, batch_size=args.batch_size, concurrency=args.concurrency
        ) as chain,
    ):
        progress.note(f"reconcile: {what} of {window.describe()} in {db.display}")
        progress.note(f"reconcile: receipts from {args.rpc_url}")

        def checked(done: int) -> None:
            elapsed = time.monotonic() - began
            progress.update(
                f"reconcile: {done:,}/{total:,} checked, {done / max(elapsed, 1e-9):,.0f}/s, "
                f"{elapsed:.0f}s elapsed"
            )

        try:
            outcome = service.reconcile(rows, chain, checked=checked)
        except RpcFailure as exc:
            progress.note(f"reconcile: {exc}")
            sys.stderr.write(f"reconcile: stopped, the node could not be asked: {exc}\n")
            return EXIT_RPC
    if outcome.mismatches:
        _out(f"{'kind':16} {'transaction':36} {'hash':66}  detail")
        for m in outcome.mismatches:
            _out(f"{m.kind:16} {m.transaction_id:36} {m.hash or '-':66}  {m.detail}")
    counts = ", ".join(f"{kind}: {n:,}" for kind, n in outcome.counts().items())
    _out(
        f"reconcile: {outcome.checked:,} checked, "
        + (
            f"{outcome.transactions_mismatched:,} differ from the chain ({counts})"
            if outcome.mismatches
            else "all match the chain"
        )
        + f" ({time.monotonic() - began:.1f} s)"
    )
    return EXIT_MISMATCHES if outcome.mismatches else 0


def _out(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
