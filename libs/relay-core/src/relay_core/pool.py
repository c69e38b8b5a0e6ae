"""The relayer pool's state, kept in the database so every process sees the same pool.

Each relayer is in one state, the first that holds of:

- ``paused``: an operator switched it off (``relay relayers pause``); it takes no new work and
  finishes what it holds;
- ``open``: its circuit is open: the executor serving it does not answer (per consumer);
- ``jammed``: its oldest ``submitted`` transaction has not been mined for
  ``relayer_jam_after_s`` (a nonce stuck at the executor, a fee too low for the market);
- ``low``: its balance is below its floor (``minBalanceWei``);
- ``ok``: it takes work, least in flight first.

Only ``ok`` relayers are given new transactions; a relayer in any other state keeps what it
holds (it is never sent again elsewhere: that could execute it twice) and comes back by itself
once the state ends (it mines again, it is funded, its executor answers, it is resumed).
Consumers write what they see of each relayer (``relayer_reports``) every few seconds;
``relay relayers`` and ``GET /api/v1/admin/relayers`` read it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from relay_core.db.models import RelayerControl, RelayerReport, Transaction, utcnow
from relay_core.errors import BadRequest
from relay_core.statuses import TxStatus

FORGET_AFTER = timedelta(hours=1)  # a report not rewritten for this long is stale


class RelayerState(StrEnum):
    ok = "ok"
    paused = "paused"
    open = "open"
    jammed = "jammed"
    low = "low"


@dataclass(frozen=True, slots=True)
class Held:
    """A relayer's ``submitted`` transactions: how many, and since when the oldest waits."""

    count: int = 0
    oldest: datetime | None = None


async def held(session: AsyncSession, default: str) -> dict[str, Held]:
    """Every relayer's submitted transactions, in one indexed read (rows sent before pools
    count for ``default``)."""
    rows = (
        await session.execute(
            select(
                Transaction.relayer,
                func.count(),
                func.min(Transaction.submitted_at),
            )
            .where(Transaction.status == TxStatus.submitted.value)
            .group_by(Transaction.relayer)
        )
    ).all()
    found: dict[str, Held] = {}
    for relayer, count, oldest in rows:
        name = relayer or default
        before = found.get(name, Held())
        earliest = min((t for t in (before.oldest, oldest) if t is not None), default=None)
        found[name] = Held(before.count + int(count), earliest)
    return found


async def oldest_submitted(session: AsyncSession, relayer: str, default: str) -> str | None:
    """The executor id of ``relayer``'s oldest submitted transaction, if it holds one."""
    mine = Transaction.relayer == relayer
    if relayer == default:
        mine = or_(mine, Transaction.relayer.is_(None))
    return await session.scalar(
        select(Transaction.executor_tx_id)
        .where(Transaction.status == TxStatus.submitted.value, mine)
        .order_by(Transaction.submitted_at)
        .limit(1)
    )


def check_relayer(relayer: str, pool: Iterable[str]) -> str:
    names = list(pool)
    if relayer not in names:
        raise BadRequest(f"relayer: {relayer!r} is not in the pool ({', '.join(names)})")
    return relayer


async def paused(session: AsyncSession) -> set[str]:
    rows = await session.scalars(
        select(RelayerControl.relayer).where(RelayerControl.state == RelayerState.paused.value)
    )
    return set(rows.all())


async def set_paused(
    session: AsyncSession, relayer: str, pause: bool, by: str, reason: str | None = None
) -> None:
    state = RelayerState.paused.value if pause else "running"
    row = await session.get(RelayerControl, relayer, with_for_update=True)
    if row is None:
        session.add(
            RelayerControl(
                relayer=relayer, state=state, reason=reason, changed_by=by, changed_at=utcnow()
            )
        )
    else:
        row.state, row.reason, row.changed_by, row.changed_at = state, reason, by, utcnow()
    await session.flush()


@dataclass(frozen=True, slots=True)
class Report:
    relayer: str
    state: str
    detail: str | None
    held: Held
    balance_wei: int | None
    balance_at: datetime | None
    last_mined_at: datetime | None


async def write_reports(session: AsyncSession, reports: Iterable[Report], by: str) -> None:
    now = utcnow()
    for mine in reports:
        row = await session.get(RelayerReport, mine.relayer)
        if row is None:
            row = RelayerReport(relayer=mine.relayer)
            session.add(row)
        row.state, row.detail = mine.state, (mine.detail or None) and mine.detail[:500]
        row.submitted, row.oldest_submitted_at = mine.held.count, mine.held.oldest
        if mine.balance_wei is not None:
            row.balance_wei, row.balance_at = str(mine.balance_wei), mine.balance_at
        if mine.last_mined_at is not None:
            row.last_mined_at = mine.last_mined_at
        row.seen_by, row.seen_at = by, now


async def overview(session: AsyncSession, pool: Iterable[str]) -> list[dict[str, Any]]:
    """Each relayer of the pool as the CLI and the admin endpoint show it."""
    names = list(pool)
    reports = {r.relayer: r for r in (await session.scalars(select(RelayerReport))).all()}
    controls = {c.relayer: c for c in (await session.scalars(select(RelayerControl))).all()}
    now = utcnow()
    views = []
    for name in names:
        report, control = reports.get(name), controls.get(name)
        fresh = report is not None and now - report.seen_at < FORGET_AFTER
        state = report.state if fresh and report is not None else "unknown"
        if control is not None and control.state == RelayerState.paused.value:
            state = RelayerState.paused.value
        views.append(
            {
                "relayer": name,
                "state": state,
                "detail": report.detail if fresh and report is not None else None,
                "submitted": report.submitted if report is not None else None,
                "oldestSubmittedAt": _iso(report.oldest_submitted_at if report else None),
                "balanceWei": report.balance_wei if report is not None else None,
                "balanceAt": _iso(report.balance_at if report else None),
                "lastMinedAt": _iso(report.last_mined_at if report else None),
                "seenAt": _iso(report.seen_at if report else None),
                "seenBy": report.seen_by if report is not None else None,
                "paused": control is not None and control.state == RelayerState.paused.value,
                "pausedBy": control.changed_by if control is not None else None,
                "pauseReason": control.reason if control is not None else None,
            }
        )
    return views


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat(timespec="seconds") + "Z"
