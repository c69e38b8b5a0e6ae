"""The ``relay`` command: operate a Relay deployment.

relay db upgrade                      apply migrations (DATABASE_URL)
relay keys create --name NAME [--role client|operator|admin] [policy options as below]
                                      prints the new key alone on the last line; a client
                                      submits nothing until it has a policy
relay keys list | relay keys revoke CLIENT_ID
relay clients show CLIENT                 a client's settings and limits (CLIENT: id or name)
relay clients policy CLIENT [--rate-per-s R --burst N | --default-rate]
        [--allow-to ADDR ... | --any-destination] [--max-value WEI|none]
        [--daily-value WEI|none] [--max-gas GAS|none] [--max-fee WEI|none]
        [--daily-fee WEI|none] [--speeds SPEED,...|any] [--[no-]gasless-value]
relay clients rotate-callback-secret CLIENT   a new callback signing secret, printed once
relay queues create                   queue + DLQ + redrive on AWS_ENDPOINT_URL / AWS
relay queues status [--json]          each lane's switch, its consumers, the queues' depths
relay queues pause|drain|resume [--lane normal] [--reason TEXT] [--wait]
                                      stop receiving / finish the queue, then stop / go on
relay dlq list [--limit N] [--json]   dead letters with their reasons and their rows
relay dlq show REF [--json]           one (REF: message or transaction id) and its history
relay dlq redrive REF ... | --all     back to the work queue, rows ready to decide afresh
        (every dlq command takes --lane fast for the fast lane's DLQ)
                                      (exit 4 when some are left in the DLQ, with why)
relay dlq purge [--yes]               delete them all (asks for the DLQ's name)
relay audit [--limit N] [--json]      what admins and operators did (and who), newest first
relay sweep --once                    enqueue committed rows that never reached SQS
relay reconcile --once                settle rows whose message is gone or whose executor
                                      record is lost (the consumers run it every minute)
relay serve                           run the API (uvicorn, one worker)
relay dev                             the whole system locally (what `make run` runs)
relay tx submit|status|wait|list      as a client, through the API (relay_api.txcli)

Exit codes: relay_api.exitcodes (docs/runbook.md#exit-codes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any

from relay_api import txcli
from relay_api.exitcodes import (
    EXIT_LEFT,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
)
from relay_api.limits.service import MIN_RATE_PER_S
from relay_api.settings import ApiSettings
from relay_core.logs import configure_logging

LANES = ("normal", "fast")  # relay_core.controls.LANES, without importing the database layer


def _out(line: str = "") -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def migrate(database_url: str) -> None:
    from alembic import command
    from alembic.config import Config

    from relay_core.db.engine import ensure_sqlite_directory
    from relay_core.settings import async_database_url

    ensure_sqlite_directory(database_url)
    config = Config()
    config.set_main_option("script_location", "relay_core:migrations")
    config.attributes["database_url"] = async_database_url(database_url)
    command.upgrade(config, "head")


async def _keys_create(settings: ApiSettings, args: argparse.Namespace) -> int:
    from relay_api.auth.service import CLIENT, create_client
    from relay_api.clients import service
    from relay_core import audit
    from relay_core.db.engine import create_engine, create_sessionmaker
    from relay_core.errors import RelayError

    role = "admin" if args.admin else args.role
    changes = _policy_changes(args)
    if changes and role != CLIENT:
        _err(f"an {role} key submits nothing: a spend policy is for a client's key")
        return EXIT_USAGE
    actor = audit.Actor.command_line()
    engine = create_engine(settings)
    try:
        async with create_sessionmaker(engine)() as session, session.begin():
            client, key = await create_client(session, args.name, role=role)
            await session.flush()
            audit.record(
                session,
                actor,
                "client.create",
                "client",
                target_id=client.id,
                target_name=client.name,
                after={"role": role},
            )
            if changes:
                try:
                    service.change(session, client, changes, settings, actor)
                except RelayError as exc:
                    _err(exc.detail)
                    raise _Abandon from exc
    except _Abandon:
        return EXIT_USAGE
    finally:
        await engine.dispose()
    _out(f"client {client.id} ({client.role}) created")
    if role == CLIENT and not changes:
        _out(
            "it may submit nothing until it is granted a spend policy: "
            f"relay clients policy {client.name} --allow-to ADDRESS --max-value WEI ..."
        )
    elif role == CLIENT:
        _out("its spend policy is granted (relay clients show " + client.name + ")")
    _out(f"callback signing secret (Standard Webhooks; shown once): {client.callback_secret}")
    _out("store this key now, it is not shown again:")
    _out(key)
    return EXIT_OK


class _Abandon(Exception):
    """Roll the command's transaction back (its reason already printed)."""


async def _keys_list(settings: ApiSettings) -> None:
    from relay_api.auth import repository
    from relay_core.db.engine import create_engine, create_sessionmaker

    engine = create_engine(settings)
    try:
        async with create_sessionmaker(engine)() as session:
            clients = await repository.all_clients(session)
    finally:
        await engine.dispose()
    from relay_core.policy import SpendPolicy

    _out(f"{'id':36}  {'role':8}  {'prefix':10}  {'revoked':7}  {'policy':9}  name")
    for c in clients:
        revoked = "yes" if c.revoked_at else "no"
        spend = SpendPolicy.of(c)
        shown = (
            "-"
            if c.role != "client"
            else "UNLIMITED"
            if spend.unlimited
            else "limits"
            if spend.granted
            else "NONE"
        )
        _out(f"{c.id:36}  {c.role:8}  {c.key_prefix:10}  {revoked:7}  {shown:9}  {c.name}")


async def _keys_revoke(settings: ApiSettings, client_id: str) -> int:
    from relay_api.auth import repository
    from relay_core import audit
    from relay_core.db.engine import create_engine, create_sessionmaker

    engine = create_engine(settings)
    try:
        async with create_sessionmaker(engine)() as session, session.begin():
            revoked = await repository.revoke(session, client_id)
            if revoked:
                audit.record(
                    session,
                    audit.Actor.command_line(),
                    "client.revoke",
                    "client",
                    target_id=client_id,
                    before={"revoked": False},
                    after={"revoked": True},
                )
    finally:
        await engine.dispose()
    _out(f"client {client_id} revoked" if revoked else f"no active client {client_id}")
    return EXIT_OK if revoked else EXIT_NOT_FOUND


async def _clients(settings: ApiSettings, args: argparse.Namespace) -> int:
    from relay_api.clients import service
    from relay_core.db.engine import create_engine, create_sessionmaker
    from relay_core.errors import RelayError

    engine = create_engine(settings)
    try:
        async with create_sessionmaker(engine)() as session, session.begin():
            try:
                client = await service.find(session, args.client)
                if args.action == "rotate-callback-secret":
                    from relay_core import apikeys

                    client.callback_secret = apikeys.generate_callback_secret()
                    _out(f"new callback signing secret of {client.name} (shown once):")
                    _out(client.callback_secret)
                    return 0
                if args.action == "policy":
                    from relay_core.audit import Actor

                    changes = _policy_changes(args)
                    service.change(session, client, changes, settings, Actor.command_line())
                    await session.flush()
                _show_client(await service.view(session, client, settings))
            except RelayError as exc:
                _err(exc.detail)
                return EXIT_NOT_FOUND if exc.status_code == 404 else EXIT_USAGE
    finally:
        await engine.dispose()
    return 0


def _policy_changes(args: argparse.Namespace) -> dict[str, Any]:
    """The flags of ``relay clients policy`` (and ``keys create``) as the changes the admin
    endpoint takes."""
    changes: dict[str, Any] = {}
    if getattr(args, "default_rate", False):
        changes.update(rateLimitPerS=None, rateLimitBurst=None)
    elif getattr(args, "rate_per_s", None) is not None or getattr(args, "burst", None) is not None:
        changes.update(rateLimitPerS=args.rate_per_s, rateLimitBurst=args.burst)
    if args.any_destination:
        changes["allowedTo"] = []
    elif args.allow_to:
        changes["allowedTo"] = args.allow_to
    for flag, field in (
        ("max_value", "maxValueWei"),
        ("daily_value", "dailyValueWei"),
        ("max_gas", "maxGas"),
        ("max_fee", "maxFeeWei"),
        ("daily_fee", "dailyFeeWei"),
    ):
        value = getattr(args, flag)
        if value == "none":
            changes[field] = None
        elif value is not None:
            changes[field] = int(value) if field == "maxGas" and value.isdigit() else value
    if args.speeds is not None:
        speeds = [] if args.speeds == "any" else [s.strip() for s in args.speeds.split(",")]
        changes["speeds"] = [s for s in speeds if s]
    if args.gasless_value is not None:
        changes["gaslessValue"] = args.gasless_value
    return changes


def _show_client(view: dict[str, Any]) -> None:
    rate, spend = view["rateLimit"], view["policy"]
    _out(f"client        {view['id']}  {view['name']}  ({view['role']})")
    _out(f"key           {view['keyPrefix']}…  {'revoked' if view['revoked'] else 'active'}")
    if view["role"] != "client":
        _out("policy        - (an admin or operator key manages; it submits nothing)")
    elif not spend["granted"]:
        _out("policy        NONE: it may submit nothing until an operator grants one")
    elif spend["unlimited"]:
        _out(
            f"policy        UNLIMITED: granted with no limit at all, {spend['grantedAt']} by "
            f"{spend['grantedBy']}"
        )
    else:
        _out(f"policy        granted {spend['grantedAt']} by {spend['grantedBy']}")
    _out(
        f"rate limit    {rate['perSecond']:g}/s, burst {rate['burst']}  "
        f"({'its own' if rate['own'] else 'the default'})"
    )
    _out(f"callback      {view['callbackUrl'] or '-'}")
    _out(f"allowed to    {', '.join(spend['allowedTo']) or 'any destination'}")
    _out(f"max value     {_wei(spend['maxValueWei'])} per transaction")
    _out(
        f"daily budget  {_wei(spend['dailyValueWei'])} per 24 hours "
        f"(reserved in the last 24 hours: {_wei(view['spentLast24hWei'])})"
    )
    _out(f"max gas       {spend['maxGas'] if spend['maxGas'] is not None else 'no limit'}")
    _out(f"max fee       {_wei(spend['maxFeeWei'])} per transaction")
    _out(
        f"fee budget    {_wei(spend['dailyFeeWei'])} per 24 hours "
        f"(reserved in the last 24 hours: {_wei(view['feesLast24hWei'])})"
    )
    _out(f"speeds        {', '.join(spend['speeds']) or 'any'}")
    _out(f"gasless value {'allowed' if spend['gaslessValue'] else 'refused'}")


def _wei(value: str | None) -> str:
    if value is None:
        return "no limit"
    return f"{value} wei ({int(value) / 10**18:g} ETH)"


def _err(line: str) -> None:
    sys.stderr.write(line + "\n")


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
            _out(jsonutil.dumps(entry))
            continue
        actor, target = entry["actor"], entry["target"]
        who = f"{actor['name']} ({actor['role']}{', ' + actor['id'] if actor['id'] else ''})"
        what = target["name"] or "-"
        if target["id"] and target["id"] != target["name"]:
            what = f"{what} ({target['id']})"
        _out(f"{entry['at']}  {entry['action']:14}  {target['kind']} {what}  by {who}")
        if entry["before"] is not None or entry["after"] is not None:
            _out(f"    before {jsonutil.dumps(entry['before'])}")
            _out(f"    after  {jsonutil.dumps(entry['after'])}")
    if not entries and not args.json:
        _out("no entries")
    return EXIT_OK


async def _queues_create(settings: ApiSettings) -> None:
    from relay_core import queue

    async with queue.sqs_client(
        config=queue.client_config(settings), **queue.sqs_client_kwargs(settings)
    ) as sqs:
        for lane in settings.lanes():
            queue_url, dlq_url = await queue.create_lane(sqs, settings, lane)
            _out(f"{lane:6} queue {queue_url}")
            _out(f"{lane:6} dlq   {dlq_url} (maxReceiveCount {settings.queue_max_receive_count})")


@contextlib.asynccontextmanager
async def _database_and_sqs(settings: ApiSettings) -> AsyncIterator[tuple[Any, Any]]:
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

    async with _database_and_sqs(settings) as (sessions, sqs):
        if args.action in controls.ACTIONS:
            state = controls.ACTIONS[args.action]
            try:
                async with sessions() as session, session.begin():
                    await service.switch(
                        session, args.lane, state, Actor.command_line(), args.reason
                    )
            except RelayError as exc:
                _err(exc.detail)
                return EXIT_USAGE
            _out(f"lane {args.lane}: {state.value}")
            if args.wait and not await _wait_for_consumers(sessions, args.lane, state):
                return EXIT_TIMEOUT
        async with sessions() as session:
            view = await service.status(session, sqs, settings)
    if getattr(args, "json", False):
        _out(jsonutil.dumps(view))
    else:
        _show_queues(view)
    return 0


async def _dlq(settings: ApiSettings, args: argparse.Namespace) -> int:
    from relay_api.queues import dlq
    from relay_core import audit, jsonutil
    from relay_core.errors import RelayError

    async with _database_and_sqs(settings) as (sessions, sqs):
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
                _out(f"purged {purged} message(s)")
                return 0
            if args.action == "redrive":
                return await _redrive(settings, sessions, sqs, args)
            async with sessions() as session:
                if args.action == "show":
                    view = await dlq.show(session, sqs, settings, args.ref, args.lane)
                else:
                    view = await dlq.listing(session, sqs, settings, args.limit, args.lane)
        except RelayError as exc:
            _err(exc.detail)
            return EXIT_NOT_FOUND if exc.status_code == 404 else EXIT_USAGE
    if args.json:
        _out(jsonutil.dumps(view))
    elif args.action == "show":
        _show_dead_letter(view)
    else:
        _out(f"{view['queue']}: {view['depth']} message(s); {len(view['messages'])} shown")
        for letter in view["messages"]:
            _show_dead_letter(letter, brief=True)
    return 0


async def _redrive(settings: ApiSettings, sessions: Any, sqs: Any, args: argparse.Namespace) -> int:
    from relay_api.queues import dlq
    from relay_core import cache as cache_mod
    from relay_core.audit import Actor

    if bool(args.all) == bool(args.refs):
        _err("name the messages (message or transaction ids) or say --all")
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
    _out(f"redriven {len(result['redriven'])}, left {len(result['left'])} ({result['how']})")
    for item in result["left"]:
        _out(f"  left {item['messageId'] or '-'}  tx {item['transactionId'] or '-'}: {item['why']}")
    return EXIT_OK if not result["left"] else EXIT_LEFT


def _ask_queue_name(name: str) -> str | None:
    if not sys.stdin.isatty():
        _err(f"purge needs --yes when not run at a terminal (it deletes every message of {name})")
        return None
    sys.stderr.write(f"this deletes every message of {name}; type its name to go on: ")
    sys.stderr.flush()
    return sys.stdin.readline().strip()


def _show_dead_letter(letter: dict[str, Any], brief: bool = False) -> None:
    row = letter["transaction"]
    state = f"{row['status']}" + (f" ({row['error']})" if row["error"] else "") if row else "no row"
    _out(
        f"{letter['messageId']}  tx {letter['transactionId'] or '-'}  "
        f"at {letter['deadLetteredAt'] or '-'}  receives {letter['receiveCount'] or '-'}"
    )
    _out(f"    why: {letter['reason']}")
    _out(f"    row: {state}")
    if brief:
        return
    _out(f"    body: {letter['body']}")
    for event in letter.get("events") or []:
        _out(
            f"    {event['at']}  {event['from'] or '-'} -> {event['to']}  {event['source']}  "
            f"{event['reason'] or ''}"
        )


async def _wait_for_consumers(sessions: Any, lane: str, state: Any, timeout_s: float = 60) -> bool:
    """Until every consumer heard from in the last 30 s says it obeys (paused, or running)."""
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
            _out(f"{len(live)} consumer(s) {wanted}")
            return True
        if asyncio.get_running_loop().time() > deadline:
            late = ", ".join(
                f"{c['consumer']} ({c['state']})" for c in live if c["state"] != wanted
            )
            _err(f"after {timeout_s:g} s, not yet {wanted}: {late}")
            return False
        await asyncio.sleep(1)


def _show_queues(view: dict[str, Any]) -> None:
    for lane in view["lanes"]:
        since = f"  since {lane['changedAt']} by {lane['changedBy']}" if lane["changedAt"] else ""
        reason = f"  ({lane['reason']})" if lane["reason"] else ""
        _out(f"lane {lane['lane']:8} {lane['state']}{since}{reason}")
    for role, depth in view["depths"].items():
        if isinstance(depth, str):
            _out(f"{role:5} {depth}")
        else:
            _out(
                f"{role:5} visible {depth['visible']}, in flight {depth['inFlight']}, "
                f"delayed {depth['delayed']}"
            )
    if not view["consumers"]:
        _out("no consumer has reported in the last hour")
    for c in view["consumers"]:
        _out(
            f"consumer {c['consumer']}  {c['lane']}  {c['state']}  in flight {c['inFlight']}  "
            f"received {c['received']}  circuit {c['circuit']}  seen {c['seenSecondsAgo']} s ago"
        )


async def _sweep_once(settings: ApiSettings) -> None:
    from relay_api.outbox.service import sweep_until_idle
    from relay_api.runtime import open_runtime

    async with open_runtime(settings, background=False) as runtime:
        count = await sweep_until_idle(
            runtime.sessions,
            runtime.queue,
            grace_s=settings.outbox_sweep_grace_s,
            batch=settings.outbox_sweep_batch,
        )
    _out(f"enqueued {count} transaction(s)")


async def _reconcile_once(settings: ApiSettings) -> None:
    from relay_core import cache as cache_mod
    from relay_core import evm, queue
    from relay_core.db.engine import create_engine, create_sessionmaker
    from relay_core.executor import ExecutorClient
    from relay_core.reconcile import Reconciler

    engine = create_engine(settings)
    redis = cache_mod.connect(settings.redis_url, 1.0) if settings.redis_url else None
    rpc = evm.EvmRpc(settings.chain_rpc_url) if settings.chain_rpc_url else None
    executor = ExecutorClient(
        settings.executor_url,
        settings.executor_api_key.get_secret_value(),
        settings.executor_relayer_id,
        timeout_s=settings.executor_timeout_s,
    )
    try:
        async with queue.sqs_client(
            config=queue.client_config(settings), **queue.sqs_client_kwargs(settings)
        ) as sqs:
            lanes = await queue.lane_urls(sqs, settings)
            status_cache = cache_mod.StatusCache.configured(redis, settings)
            reconciler = Reconciler(
                create_sessionmaker(engine),
                sqs,
                lanes,
                settings,
                status_cache,
                executor=executor,
                rpc=rpc,
            )
            report = await reconciler.run_once()
    finally:
        if redis is not None:
            await redis.aclose()
        if rpc is not None:
            await rpc.aclose()
        await executor.aclose()
        await engine.dispose()
    _out(
        f"examined {report.examined} row(s): {report.requeued} enqueued again, "
        f"{report.dead_lettered} failed as dead-lettered, "
        f"{report.lost_upstream} settled as lost by the executor"
    )
    for note in report.notes:
        _out(f"note: {note}")


def serve(settings: ApiSettings) -> None:
    import uvicorn

    from relay_api.app import create_app

    configure_logging(settings.log_level)
    settings.check_production_secrets()
    # uvicorn drains on SIGTERM/SIGINT and then re-raises the signal against the handlers it
    # found at start. Ignoring it there turns a completed graceful shutdown into exit code 0.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: None)
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
        # The caller's address is Relay's to decide (RELAY_TRUST_FORWARDED_FOR, client_address):
        # uvicorn's own X-Forwarded-For rewriting (trusting 127.0.0.1 by default) would let a
        # local client choose the address its unauthenticated requests are limited by, and it
        # cost CPU on every request.
        proxy_headers=False,
        timeout_graceful_shutdown=20,
    )


def _rate(text: str) -> float:
    value = float(text)
    if not MIN_RATE_PER_S <= value <= 1_000_000:
        raise argparse.ArgumentTypeError(f"must be between {MIN_RATE_PER_S:g} and 1000000")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _policy_options(command: argparse.ArgumentParser) -> None:
    """A spend policy's options (``clients policy``, ``keys create``): any of them grants the
    client its policy if it had none."""
    allowed = command.add_mutually_exclusive_group()
    allowed.add_argument(
        "--allow-to",
        action="append",
        metavar="ADDRESS",
        help="a destination it may call (repeat for more; replaces the list)",
    )
    allowed.add_argument("--any-destination", action="store_true", help="clear the allowlist")
    command.add_argument("--max-value", metavar="WEI|none", help="most value per transaction")
    command.add_argument("--daily-value", metavar="WEI|none", help="most value per rolling 24 h")
    command.add_argument("--max-gas", metavar="GAS|none", help="highest gas limit")
    command.add_argument(
        "--max-fee", metavar="WEI|none", help="most fee per transaction (gas limit x price)"
    )
    command.add_argument("--daily-fee", metavar="WEI|none", help="most fee per rolling 24 h")
    command.add_argument(
        "--speeds",
        metavar="SPEED,...|any",
        help="the speeds it may ask for (safeLow, average, fast, fastest)",
    )
    gasless = command.add_mutually_exclusive_group()
    gasless.add_argument(
        "--gasless-value",
        dest="gasless_value",
        action="store_const",
        const=True,
        help="let its gasless requests carry value (the relayer pays it)",
    )
    gasless.add_argument(
        "--no-gasless-value", dest="gasless_value", action="store_const", const=False
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="relay", description="Operate a Relay deployment.")
    sub = parser.add_subparsers(dest="command", required=True)

    db = sub.add_parser("db", help="database schema").add_subparsers(dest="action", required=True)
    db.add_parser("upgrade", help="apply migrations up to head")

    keys = sub.add_parser("keys", help="API clients and keys").add_subparsers(
        dest="action", required=True
    )
    create = keys.add_parser(
        "create",
        help="create a client; prints its key on the last line (a client's key submits "
        "nothing until it has a spend policy: give its options here)",
    )
    create.add_argument("--name", required=True)
    create.add_argument(
        "--role",
        choices=("client", "operator", "admin"),
        default="client",
        help="client: submits within its policy; operator: dashboard, queues, dead letters, "
        "reads everything; admin: an operator's rights and keys, policies, purges",
    )
    create.add_argument("--admin", action="store_true", help="the same as --role admin")
    _policy_options(create)
    keys.add_parser("list", help="list clients (never keys)")
    revoke = keys.add_parser("revoke", help="revoke a client's key")
    revoke.add_argument("client_id")

    clients = sub.add_parser("clients", help="a client's limits and settings").add_subparsers(
        dest="action", required=True
    )
    show = clients.add_parser("show", help="a client's settings and limits")
    show.add_argument("client", help="client id, or name when it is unique")
    policy = clients.add_parser("policy", help="set a client's limits (then shows them)")
    policy.add_argument("client", help="client id, or name when it is unique")
    policy.add_argument("--rate-per-s", type=_rate, help="requests per second")
    policy.add_argument("--burst", type=_positive_int, help="requests at once")
    policy.add_argument(
        "--default-rate", action="store_true", help="back to the deployment's default"
    )
    _policy_options(policy)

    rotate = clients.add_parser(
        "rotate-callback-secret", help="a new secret for the client's callbacks (printed once)"
    )
    rotate.add_argument("client", help="client id, or name when it is unique")

    queues = sub.add_parser("queues", help="SQS queues").add_subparsers(
        dest="action", required=True
    )
    queues.add_parser("create", help="create each lane's queue and its DLQ with the redrive policy")
    status = queues.add_parser("status", help="lanes, consumers and queue depths")
    status.add_argument("--json", action="store_true", help="as JSON")
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

    dead = sub.add_parser("dlq", help="the dead-letter queue").add_subparsers(
        dest="action", required=True
    )
    listing = dead.add_parser("list", help="its messages with their reasons and rows")
    listing.add_argument("--limit", type=_positive_int, default=100, help="most to read (100)")
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

    sweep = sub.add_parser("sweep", help="send committed rows that never reached SQS")
    sweep.add_argument("--once", action="store_true", required=True, help="one pass, then exit")

    reconcile = sub.add_parser(
        "reconcile", help="settle rows no other loop would look at again (docs/runbook.md)"
    )
    reconcile.add_argument("--once", action="store_true", required=True, help="one pass")

    trail = sub.add_parser("audit", help="what admins and operators did, newest first")
    trail.add_argument("--limit", type=_positive_int, default=50, help="most entries (50)")
    trail.add_argument("--json", action="store_true", help="as JSON, one entry a line")

    sub.add_parser("serve", help="run the API server")
    sub.add_parser("dev", help="run the whole system locally (make run)")
    txcli.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "tx":
        return txcli.run(args)
    if args.command == "dev":
        from relay_api.devserver import run

        return run()
    settings = ApiSettings()
    try:
        return _command(args, settings)
    except Exception as exc:
        code = _failure(exc, settings)
        if code is None:
            raise
        return code


def _failure(exc: Exception, settings: ApiSettings) -> int | None:
    """The exit code and a plain message for what an operator can fix (a database or SQS
    out of reach, a database without its schema); None for a bug, which keeps its traceback."""
    from botocore.exceptions import BotoCoreError
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import DBAPIError

    where = make_url(settings.database_url).render_as_string(hide_password=True)
    if isinstance(exc, DBAPIError):
        text = str(exc.orig)
        if "no such table" in text or "doesn't exist" in text:
            _err(f"the database at {where} has no schema yet: run `relay db upgrade` first")
            return EXIT_USAGE
        _err(f"cannot use the database at {where} (DATABASE_URL): {text[:300]}")
        return EXIT_UNREACHABLE
    if isinstance(exc, BotoCoreError | ConnectionError):
        _err(f"cannot reach SQS or the database: {str(exc)[:300]}")
        return EXIT_UNREACHABLE
    return None


def _command(args: argparse.Namespace, settings: ApiSettings) -> int:
    if args.command == "serve":
        serve(settings)
        return 0
    if args.command == "db":
        migrate(settings.database_url)
        _out("database at head")
        return 0
    if args.command == "keys":
        if args.action == "create":
            return asyncio.run(_keys_create(settings, args))
        if args.action == "list":
            asyncio.run(_keys_list(settings))
        else:
            return asyncio.run(_keys_revoke(settings, args.client_id))
        return 0
    if args.command == "clients":
        return asyncio.run(_clients(settings, args))
    if args.command == "queues":
        if args.action == "create":
            asyncio.run(_queues_create(settings))
            return 0
        return asyncio.run(_queues(settings, args))
    if args.command == "dlq":
        return asyncio.run(_dlq(settings, args))
    if args.command == "audit":
        return asyncio.run(_audit(settings, args))
    if args.command == "sweep":
        asyncio.run(_sweep_once(settings))
        return 0
    if args.command == "reconcile":
        asyncio.run(_reconcile_once(settings))
        return 0
    return 2


def serve_main(argv: Sequence[str] | None = None) -> None:
    """``relay-api``: the API server alone (what the container runs); ``relay serve`` too."""
    argparse.ArgumentParser(
        prog="relay-api",
        description="Run the Relay HTTP API (uvicorn, one worker) on HOST:PORT "
        "(127.0.0.1:8000). Configured by the environment: docs/configuration.md.",
    ).parse_args(argv)
    serve(ApiSettings())


if __name__ == "__main__":
    sys.exit(main())
