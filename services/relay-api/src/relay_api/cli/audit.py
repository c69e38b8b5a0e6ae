"""``relay audit``: what admins, operators and the relay command did, newest first."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from relay_api.cli.common import out, positive_int, with_settings
from relay_api.exitcodes import EXIT_OK

if TYPE_CHECKING:
    from relay_api.settings import ApiSettings


def add_parsers(sub: Any) -> None:
    trail = sub.add_parser("audit", help="what admins and operators did, newest first")
    trail.add_argument("--limit", type=positive_int, default=50, help="most entries (50)")
    trail.add_argument("--json", action="store_true", help="as JSON, one entry a line")
    trail.set_defaults(handler=with_settings(_audit))


async def _audit(settings: ApiSettings, args: argparse.Namespace) -> int:
    from relay_core import audit, jsonutil
    from relay_core.db.engine import create_engine, create_sessionmaker

    engine = create_engine(settings)
    try:
        async with create_sessionmaker(engine)() as session:
            entries = [audit.view(e) for e in await audit.newest(session, limit=args.limit)]
    finally:
        await engine.dispose()
    for entry in entries:
        if args.json:
            out(jsonutil.dumps(entry))
            continue
        actor, target = entry["actor"], entry["target"]
        who = f"{actor['name']} ({actor['role']}{', ' + actor['id'] if actor['id'] else ''})"
        what = target["name"] or "-"
        if target["id"] and target["id"] != target["name"]:
            what = f"{what} ({target['id']})"
        out(f"{entry['at']}  {entry['action']:14}  {target['kind']} {what}  by {who}")
        if entry["before"] is not None or entry["after"] is not None:
            out(f"    before {jsonutil.dumps(entry['before'])}")
            out(f"    after  {jsonutil.dumps(entry['after'])}")
    if not entries and not args.json:
        out("no entries")
    return EXIT_OK
