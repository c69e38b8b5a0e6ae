"""``relay queues``: each lane's queue (create, status) and its switch (pause, drain,
resume), from the database and SQS."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from relay_api.cli.common import LANES, err, out, with_settings
from relay_api.exitcodes import EXIT_OK, EXIT_TIMEOUT, EXIT_USAGE

if TYPE_CHECKING:
    from relay_api.settings import ApiSettings


def add_parsers(sub: Any) -> None:
    queues = sub.add_parser("queues", help="SQS queues").add_subparsers(
        dest="action", required=True
    )
    queues.add_parser(
        "create", help="create each lane's queue and its DLQ with the redrive policy"
    ).set_defaults(handler=with_settings(_create))
    status = queues.add_parser("status", help="lanes, consumers and queue depths")
    status.add_argument("--json", action="store_true", help="as JSON")
    status.set_defaults(handler=with_settings(_queues))
    for action, about in (
        ("pause", "consumers receive nothing and finish what they hold"),
        ("drain", "consumers go on until the queue is empty, then the lane is paused"),
        ("resume", "consumers receive again"),
    ):
        switch = queues.add_parser(action, help=about)
        switch.add_argument(
            "--lane", default="normal", choices=LANES, help="the lane (default: normal)"
        )
        switch.add_argument("--reason", help="shown beside the state")
        switch.add_argument(
            "--wait",
            action="store_true",
            help="wait until every live consumer obeys (exit 3 if not within 60 s)",
        )
        switch.set_defaults(handler=with_settings(_queues))


async def _create(settings: ApiSettings, args: argparse.Namespace) -> int:
    from relay_api.provision import create_queues

    await create_queues(settings, out)
    return EXIT_OK


@contextlib.asynccontextmanager
async def database_and_sqs(settings: ApiSettings) -> AsyncIterator[tuple[Any, Any]]:
    """A session maker and an SQS client, for the commands that need both."""
    from relay_core import queue
    from relay_core.db.engine import create_engine, create_sessionmaker

    engine = create_engine(settings)
    try:
        async with queue.sqs_client(
            config=queue.client_config(settings), **queue.sqs_client_kwargs(settings)
        ) as sqs:
            yield create_sessionmaker(engine), sqs
    finally:
        await engine.dispose()


async def _queues(settings: ApiSettings, args: argparse.Namespace) -> int:
    from relay_api.queues import service
    from relay_core import controls, jsonutil
    from relay_core.audit import Actor
    from relay_core.errors import RelayError

    async with database_and_sqs(settings) as (sessions, sqs):
        if args.action in controls.ACTIONS:
            state = controls.ACTIONS[args.action]
            try:
                async with sessions() as session, session.begin():
                    await service.switch(
                        session, args.lane, state, Actor.command_line(), args.reason
                    )
            except RelayError as exc:
                err(exc.detail)
                return EXIT_USAGE
            out(f"lane {args.lane}: {state.value}")
            if args.wait and not await _wait_for_consumers(sessions, args.lane, state):
                return EXIT_TIMEOUT
        async with sessions() as session:
            view = await service.status(session, sqs, settings)
    if getattr(args, "json", False):
        out(jsonutil.dumps(view))
    else:
        _show(view)
    return EXIT_OK


async def _wait_for_consumers(sessions: Any, lane: str, state: Any, timeout_s: float = 60) -> bool:
    """Until every consumer heard from in the last 30 s says it obeys (paused, or running)."""
    import asyncio

    from relay_core import controls

    wanted = {controls.LaneState.paused: "paused", controls.LaneState.running: "running"}.get(state)
    if wanted is None:  # draining ends by itself, when the queue is empty
        return True
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        async with sessions() as session:
            consumers = (await controls.overview(session))["consumers"]
        live = [c for c in consumers if c["lane"] == lane and c["seenSecondsAgo"] < 30]
        if all(c["state"] == wanted for c in live):
            out(f"{len(live)} consumer(s) {wanted}")
            return True
        if asyncio.get_running_loop().time() > deadline:
            late = ", ".join(
                f"{c['consumer']} ({c['state']})" for c in live if c["state"] != wanted
            )
            err(f"after {timeout_s:g} s, not yet {wanted}: {late}")
            return False
        await asyncio.sleep(1)


def _show(view: dict[str, Any]) -> None:
    for lane in view["lanes"]:
        since = f"  since {lane['changedAt']} by {lane['changedBy']}" if lane["changedAt"] else ""
        reason = f"  ({lane['reason']})" if lane["reason"] else ""
        out(f"lane {lane['lane']:8} {lane['state']}{since}{reason}")
    for role, depth in view["depths"].items():
        if isinstance(depth, str):
            out(f"{role:5} {depth}")
        else:
            out(
                f"{role:5} visible {depth['visible']}, in flight {depth['inFlight']}, "
                f"delayed {depth['delayed']}"
            )
    if not view["consumers"]:
        out("no consumer has reported in the last hour")
    for c in view["consumers"]:
        out(
            f"consumer {c['consumer']}  {c['lane']}  {c['state']}  in flight {c['inFlight']}  "
            f"received {c['received']}  circuit {c['circuit']}  seen {c['seenSecondsAgo']} s ago"
        )
