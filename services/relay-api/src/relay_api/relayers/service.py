"""The relayer pool as an operator sees and switches it: the same view and the same rules for
``relay relayers [pause|resume]`` and the admin endpoints (relay_core.pool holds the states)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from relay_core import audit, pool
from relay_core.db.models import RelayerControl
from relay_core.settings import InfraSettings


async def status(session: AsyncSession, settings: InfraSettings) -> dict[str, Any]:
    """Each relayer of the pool, in its order: its state, what it holds, its balance."""
    specs = settings.relayer_specs()
    views = await pool.overview(session, [spec.id for spec in specs])
    for view, spec in zip(views, specs, strict=True):
        view["minBalanceWei"] = str(spec.min_balance_wei)
    return {
        "relayers": views,
        "jamAfterS": settings.relayer_jam_after_s,
        "minBalanceWei": str(settings.relayer_min_balance_wei),
    }


# What the audit log calls each switch.
ACTIONS = {True: "relayer.pause", False: "relayer.resume"}


async def switch(
    session: AsyncSession,
    settings: InfraSettings,
    relayer: str,
    pause: bool,
    actor: audit.Actor,
    reason: str | None,
) -> None:
    """Pause or resume a relayer of the pool (400 for one not in it); in the audit log."""
    relayer = pool.check_relayer(relayer, [spec.id for spec in settings.relayer_specs()])
    control = await session.get(RelayerControl, relayer, with_for_update=True)
    before = control.state if control is not None else "running"
    await pool.set_paused(session, relayer, pause, actor.name, reason)
    audit.record(
        session,
        actor,
        ACTIONS[pause],
        "relayer",
        target_name=relayer,
        before={"state": before},
        after={"state": "paused" if pause else "running", "reason": reason},
    )
