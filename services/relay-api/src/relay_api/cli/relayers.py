"""``relay relayers``: each relayer of the pool (its state, what it holds, its balance) and its
switch (pause, resume), from the database."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from relay_api.cli.common import err, out, with_settings
from relay_api.exitcodes import EXIT_OK, EXIT_USAGE

if TYPE_CHECKING:
    from relay_api.settings import ApiSettings


def add_parsers(sub: Any) -> None:
    relayers = sub.add_parser("relayers", help="the relayer pool: states, balances, switch")
    relayers.add_argument("--json", action="store_true", help="as JSON")
    relayers.set_defaults(handler=with_settings(_relayers))
    actions = relayers.add_subparsers(dest="action")
    for action, about in (
        ("pause", "the relayer takes no new work and finishes what it holds"),
        ("resume", "the relayer takes work again"),
    ):
        switch = actions.add_parser(action, help=about)
        switch.add_argument(
            "relayer", metavar="RELAYER", help="its id (as RELAY_EXECUTOR_RELAYERS names it)"
        )
        if action == "pause":
            switch.add_argument("--reason", metavar="TEXT", help="shown beside the state")
        switch.set_defaults(handler=with_settings(_relayers))


async def _relayers(settings: ApiSettings, args: argparse.Namespace) -> int:
    from relay_api.relayers import service
    from relay_core import jsonutil
    from relay_core.audit import Actor
    from relay_core.db.engine import create_engine, create_sessionmaker
    from relay_core.errors import RelayError

    engine = create_engine(settings)
    try:
        sessions = create_sessionmaker(engine)
        if args.action is not None:
            pause = args.action == "pause"
            try:
                async with sessions() as session, session.begin():
                    await service.switch(
                        session,
                        settings,
                        args.relayer,
                        pause,
                        Actor.command_line(),
                        getattr(args, "reason", None),
                    )
            except RelayError as exc:
                err(exc.detail)
                return EXIT_USAGE
            out(f"relayer {args.relayer}: {'paused' if pause else 'running'}")
        async with sessions() as session:
            view = await service.status(session, settings)
    finally:
        await engine.dispose()
    if args.json:
        out(jsonutil.dumps(view))
    else:
        _show(view)
    return EXIT_OK


def _show(view: dict[str, Any]) -> None:
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    out(
        f"{'relayer':16}  {'state':8}  {'in flight':>9}  {'oldest':>8}  "
        f"{'balance':>40}  {'last mined':>10}  detail"
    )
    for r in view["relayers"]:
        held = "-" if r["submitted"] is None else str(r["submitted"])
        oldest = _ago(r["oldestSubmittedAt"], now) if r["submitted"] else "-"
        mined = _ago(r["lastMinedAt"], now)
        notes = [r["detail"]] if r["detail"] else []
        if r["paused"]:
            why = f": {r['pauseReason']}" if r["pauseReason"] else ""
            notes.insert(0, f"paused by {r['pausedBy']}{why}")
        detail = "; ".join(notes)
        out(
            f"{r['relayer']:16}  {r['state']:8}  {held:>9}  {oldest:>8}  "
            f"{_balance(r['balanceWei']):>40}  {mined:>10}  {detail}".rstrip()
        )
    out(
        f"jammed: a submitted transaction not mined for {view['jamAfterS']:g} s; "
        f"low: a balance under {_balance(view['minBalanceWei'])}"
    )


def _balance(wei: str | None) -> str:
    """Wei as ETH with 4 decimals, and exactly: ``1.2500 ETH (1250000000000000000 wei)``."""
    if wei is None:
        return "-"
    from decimal import Decimal

    return f"{Decimal(int(wei)) / Decimal(10**18):.4f} ETH ({int(wei)} wei)"


def _ago(iso: str | None, now: Any) -> str:
    """How long ago an ISO time (``…Z``) was: ``12 s``, ``4 min``, ``3 h``, ``2 d``."""
    if iso is None:
        return "-"
    from datetime import datetime

    at = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    s = max(0.0, (now - at).total_seconds())
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.0f} h" if s < 172800 else f"{s / 86400:.0f} d"
