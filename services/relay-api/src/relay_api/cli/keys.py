"""``relay keys``: API clients and their keys (create, list, revoke), in the database."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from relay_api.cli import clients
from relay_api.cli.common import err, out, with_settings
from relay_api.exitcodes import EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE

if TYPE_CHECKING:
    from relay_api.settings import ApiSettings


def add_parsers(sub: Any) -> None:
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
    clients.policy_options(create)
    create.set_defaults(handler=with_settings(_create))
    keys.add_parser("list", help="list clients (never keys)").set_defaults(
        handler=with_settings(_list)
    )
    revoke = keys.add_parser("revoke", help="revoke a client's key")
    revoke.add_argument("client_id")
    revoke.set_defaults(handler=with_settings(_revoke))


class _Abandon(Exception):
    """Roll the command's transaction back (its reason already printed)."""


async def _create(settings: ApiSettings, args: argparse.Namespace) -> int:
    from relay_api.auth.service import CLIENT, create_client
    from relay_api.clients import service
    from relay_core import audit
    from relay_core.db.engine import create_engine, create_sessionmaker
    from relay_core.errors import RelayError

    role = "admin" if args.admin else args.role
    changes = clients.policy_changes(args)
    if changes and role != CLIENT:
        err(f"an {role} key submits nothing: a spend policy is for a client's key")
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
                    err(exc.detail)
                    raise _Abandon from exc
    except _Abandon:
        return EXIT_USAGE
    finally:
        await engine.dispose()
    out(f"client {client.id} ({client.role}) created")
    if role == CLIENT and not changes:
        out(
            "it may submit nothing until it is granted a spend policy: "
            f"relay clients policy {client.name} --allow-to ADDRESS --max-value WEI ..."
        )
    elif role == CLIENT:
        out("its spend policy is granted (relay clients show " + client.name + ")")
    out(f"callback signing secret (Standard Webhooks; shown once): {client.callback_secret}")
    out("store this key now, it is not shown again:")
    out(key)
    return EXIT_OK


async def _list(settings: ApiSettings, args: argparse.Namespace) -> int:
    from relay_api.auth import repository
    from relay_core.db.engine import create_engine, create_sessionmaker
    from relay_core.policy import SpendPolicy

    engine = create_engine(settings)
    try:
        async with create_sessionmaker(engine)() as session:
            found = await repository.all_clients(session)
    finally:
        await engine.dispose()
    out(f"{'id':36}  {'role':8}  {'prefix':10}  {'revoked':7}  {'policy':9}  name")
    for c in found:
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
        out(f"{c.id:36}  {c.role:8}  {c.key_prefix:10}  {revoked:7}  {shown:9}  {c.name}")
    return EXIT_OK


async def _revoke(settings: ApiSettings, args: argparse.Namespace) -> int:
    from relay_api.auth import repository
    from relay_core import audit
    from relay_core.db.engine import create_engine, create_sessionmaker

    engine = create_engine(settings)
    try:
        async with create_sessionmaker(engine)() as session, session.begin():
            revoked = await repository.revoke(session, args.client_id)
            if revoked:
                audit.record(
                    session,
                    audit.Actor.command_line(),
                    "client.revoke",
                    "client",
                    target_id=args.client_id,
                    before={"revoked": False},
                    after={"revoked": True},
                )
    finally:
        await engine.dispose()
    out(f"client {args.client_id} revoked" if revoked else f"no active client {args.client_id}")
    return EXIT_OK if revoked else EXIT_NOT_FOUND
