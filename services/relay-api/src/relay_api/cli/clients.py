"""``relay clients``: a client's settings and limits (show, policy, a new callback secret);
and a spend policy's options, which ``relay keys create`` takes too."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from relay_api.cli.common import err, out, positive_int, rate, with_settings
from relay_api.exitcodes import EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE

if TYPE_CHECKING:
    from relay_api.settings import ApiSettings

_CLIENT = "client id, or name when it is unique"


def add_parsers(sub: Any) -> None:
    clients = sub.add_parser("clients", help="a client's limits and settings").add_subparsers(
        dest="action", required=True
    )
    show = clients.add_parser("show", help="a client's settings and limits")
    show.add_argument("client", help=_CLIENT)
    policy = clients.add_parser("policy", help="set a client's limits (then shows them)")
    policy.add_argument("client", help=_CLIENT)
    policy.add_argument("--rate-per-s", type=rate, help="requests per second")
    policy.add_argument("--burst", type=positive_int, help="requests at once")
    policy.add_argument(
        "--default-rate", action="store_true", help="back to the deployment's default"
    )
    policy_options(policy)
    rotate = clients.add_parser(
        "rotate-callback-secret", help="a new secret for the client's callbacks (printed once)"
    )
    rotate.add_argument("client", help=_CLIENT)
    for command in (show, policy, rotate):
        command.set_defaults(handler=with_settings(_clients))


def policy_options(command: argparse.ArgumentParser) -> None:
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


def policy_changes(args: argparse.Namespace) -> dict[str, Any]:
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
                    out(f"new callback signing secret of {client.name} (shown once):")
                    out(client.callback_secret)
                    return EXIT_OK
                if args.action == "policy":
                    from relay_core.audit import Actor

                    changes = policy_changes(args)
                    service.change(session, client, changes, settings, Actor.command_line())
                    await session.flush()
                _show(await service.view(session, client, settings))
            except RelayError as exc:
                err(exc.detail)
                return EXIT_NOT_FOUND if exc.status_code == 404 else EXIT_USAGE
    finally:
        await engine.dispose()
    return EXIT_OK


def _show(view: dict[str, Any]) -> None:
    rate_limit, spend = view["rateLimit"], view["policy"]
    out(f"client        {view['id']}  {view['name']}  ({view['role']})")
    out(f"key           {view['keyPrefix']}…  {'revoked' if view['revoked'] else 'active'}")
    if view["role"] != "client":
        out("policy        - (an admin or operator key manages; it submits nothing)")
    elif not spend["granted"]:
        out("policy        NONE: it may submit nothing until an operator grants one")
    elif spend["unlimited"]:
        out(
            f"policy        UNLIMITED: granted with no limit at all, {spend['grantedAt']} by "
            f"{spend['grantedBy']}"
        )
    else:
        out(f"policy        granted {spend['grantedAt']} by {spend['grantedBy']}")
    out(
        f"rate limit    {rate_limit['perSecond']:g}/s, burst {rate_limit['burst']}  "
        f"({'its own' if rate_limit['own'] else 'the default'})"
    )
    out(f"callback      {view['callbackUrl'] or '-'}")
    out(f"allowed to    {', '.join(spend['allowedTo']) or 'any destination'}")
    out(f"max value     {_wei(spend['maxValueWei'])} per transaction")
    out(
        f"daily budget  {_wei(spend['dailyValueWei'])} per 24 hours "
        f"(reserved in the last 24 hours: {_wei(view['spentLast24hWei'])})"
    )
    out(f"max gas       {spend['maxGas'] if spend['maxGas'] is not None else 'no limit'}")
    out(f"max fee       {_wei(spend['maxFeeWei'])} per transaction")
    out(
        f"fee budget    {_wei(spend['dailyFeeWei'])} per 24 hours "
        f"(reserved in the last 24 hours: {_wei(view['feesLast24hWei'])})"
    )
    out(f"speeds        {', '.join(spend['speeds']) or 'any'}")
    out(f"gasless value {'allowed' if spend['gaslessValue'] else 'refused'}")


def _wei(value: str | None) -> str:
    if value is None:
        return "no limit"
    return f"{value} wei ({int(value) / 10**18:g} ETH)"
