"""The audit log: every action of an admin or an operator (a policy granted or changed, a key
created or revoked, a lane paused, drained or resumed, dead letters redriven or purged), with
who did it (the key's client, or the `relay` command's user and host), when, to what, and the
target's state before and after. An entry is written in the same database transaction as the
change it records, so there is no change without its entry; entries are never changed.

Read by ``GET /api/v1/admin/audit`` (admin and operator keys) and ``relay audit``.
"""

from __future__ import annotations

import getpass
import socket
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from relay_core.db.models import AuditEntry, utcnow


@dataclass(frozen=True, slots=True)
class Actor:
    """Who acts: a key's client (``id``, ``name``, its role), or the `relay` command."""

    id: str | None
    name: str
    role: str

    @classmethod
    def command_line(cls) -> Actor:
        """The operator at a terminal: the `relay` command reaches the database directly, so
        the system user and host are what there is to name."""
        try:
            user = getpass.getuser()
        except (KeyError, OSError):  # no name for this uid (a container)
            user = "?"
        return cls(None, f"relay command, {user}@{socket.gethostname()}"[:200], "cli")


def record(
    session: AsyncSession,
    actor: Actor,
    action: str,
    target_kind: str,
    *,
    target_id: str | None = None,
    target_name: str | None = None,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    at: datetime | None = None,
) -> AuditEntry:
    """Add an entry to ``session``'s transaction (committed, or rolled back, with the change)."""
    entry = AuditEntry(
        at=at or utcnow(),
        actor_id=actor.id,
        actor_name=actor.name,
        actor_role=actor.role,
        action=action,
        target_kind=target_kind,
        target_id=target_id,
        target_name=target_name,
        before=before,
        after=after,
    )
    session.add(entry)
    return entry


async def newest(
    session: AsyncSession, *, limit: int, before_id: int | None = None
) -> list[AuditEntry]:
    """Entries newest first; ``before_id``: those older than that entry (the next page)."""
    query = select(AuditEntry).order_by(AuditEntry.id.desc()).limit(limit)
    if before_id is not None:
        query = query.where(AuditEntry.id < before_id)
    return list((await session.execute(query)).scalars())


def view(entry: AuditEntry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "at": entry.at.isoformat(timespec="milliseconds") + "Z",
        "actor": {"id": entry.actor_id, "name": entry.actor_name, "role": entry.actor_role},
        "action": entry.action,
        "target": {"kind": entry.target_kind, "id": entry.target_id, "name": entry.target_name},
        "before": entry.before,
        "after": entry.after,
    }
