"""``relay dlq``: each lane's dead letters (list, show, redrive, purge)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from relay_api.cli.common import LANES, err, out, positive_int, with_settings
from relay_api.cli.queues import database_and_sqs
from relay_api.exitcodes import EXIT_LEFT, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE

if TYPE_CHECKING:
    from relay_api.settings import ApiSettings


def add_parsers(sub: Any) -> None:
    dead = sub.add_parser("dlq", help="the dead-letter queue").add_subparsers(
        dest="action", required=True
    )
    listing = dead.add_parser("list", help="its messages with their reasons and rows")
    listing.add_argument("--limit", type=positive_int, default=100, help="most to read (100)")
    listing.add_argument("--json", action="store_true", help="as JSON")
    one = dead.add_parser("show", help="one message, its body and its row's history")
    one.add_argument("ref", help="the message id or the transaction id")
    one.add_argument("--json", action="store_true", help="as JSON")
    redrive = dead.add_parser(
        "redrive", help="send messages back to the work queue, their rows ready to decide afresh"
    )
    redrive.add_argument("refs", nargs="*", metavar="REF", help="message or transaction ids")
    redrive.add_argument("--all", action="store_true", help="every message of the DLQ")
    purge = dead.add_parser("purge", help="delete every message (asks for the queue's name)")
    purge.add_argument("--yes", action="store_true", help="do not ask")
    for command in (listing, one, redrive, purge):
        command.add_argument(
            "--lane", default="normal", choices=LANES, help="whose DLQ: normal (default) or fast"
        )
        command.set_defaults(handler=with_settings(_dlq))


async def _dlq(settings: ApiSettings, args: argparse.Namespace) -> int:
    from relay_api.queues import dlq
    from relay_core import audit, jsonutil
    from relay_core.errors import RelayError

    async with database_and_sqs(settings) as (sessions, sqs):
        try:
            if args.action == "purge":
                name = dlq.lane_names(settings, args.lane)[1]
                confirm = name if args.yes else _ask_queue_name(name)
                purged = await dlq.purge(sqs, settings, confirm, args.lane)
                async with sessions() as session, session.begin():
                    audit.record(
                        session,
                        audit.Actor.command_line(),
                        "dlq.purge",
                        "dlq",
                        target_name=args.lane,
                        after={"purged": purged},
                    )
                out(f"purged {purged} message(s)")
                return EXIT_OK
            if args.action == "redrive":
                return await _redrive(settings, sessions, sqs, args)
            async with sessions() as session:
                if args.action == "show":
                    view = await dlq.show(session, sqs, settings, args.ref, args.lane)
                else:
                    view = await dlq.listing(session, sqs, settings, args.limit, args.lane)
        except RelayError as exc:
            err(exc.detail)
            return EXIT_NOT_FOUND if exc.status_code == 404 else EXIT_USAGE
    if args.json:
        out(jsonutil.dumps(view))
    elif args.action == "show":
        _show(view)
    else:
        out(f"{view['queue']}: {view['depth']} message(s); {len(view['messages'])} shown")
        for letter in view["messages"]:
            _show(letter, brief=True)
    return EXIT_OK


async def _redrive(settings: ApiSettings, sessions: Any, sqs: Any, args: argparse.Namespace) -> int:
    from relay_api.queues import dlq
    from relay_core import cache as cache_mod
    from relay_core.audit import Actor

    if bool(args.all) == bool(args.refs):
        err("name the messages (message or transaction ids) or say --all")
        return EXIT_USAGE
    redis = (
        cache_mod.connect(settings.redis_url, settings.redis_timeout_s)
        if settings.redis_url
        else None
    )
    cache = cache_mod.StatusCache.configured(redis, settings)
    try:
        refs = None if args.all else args.refs
        result = await dlq.redrive(
            sessions, sqs, settings, cache, refs, by=Actor.command_line(), lane=args.lane
        )
    finally:
        if redis is not None:
            await redis.aclose()
    out(f"redriven {len(result['redriven'])}, left {len(result['left'])} ({result['how']})")
    for item in result["left"]:
        out(f"  left {item['messageId'] or '-'}  tx {item['transactionId'] or '-'}: {item['why']}")
    return EXIT_OK if not result["left"] else EXIT_LEFT


def _ask_queue_name(name: str) -> str | None:
    if not sys.stdin.isatty():
        err(f"purge needs --yes when not run at a terminal (it deletes every message of {name})")
        return None
    sys.stderr.write(f"this deletes every message of {name}; type its name to go on: ")
    sys.stderr.flush()
    return sys.stdin.readline().strip()


def _show(letter: dict[str, Any], brief: bool = False) -> None:
    row = letter["transaction"]
    state = f"{row['status']}" + (f" ({row['error']})" if row["error"] else "") if row else "no row"
    out(
        f"{letter['messageId']}  tx {letter['transactionId'] or '-'}  "
        f"at {letter['deadLetteredAt'] or '-'}  receives {letter['receiveCount'] or '-'}"
    )
    out(f"    why: {letter['reason']}")
    out(f"    row: {state}")
    if brief:
        return
    out(f"    body: {letter['body']}")
    for event in letter.get("events") or []:
        out(
            f"    {event['at']}  {event['from'] or '-'} -> {event['to']}  {event['source']}  "
            f"{event['reason'] or ''}"
        )
