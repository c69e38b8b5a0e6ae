"""``relay tx``: submit and follow transactions from a terminal, through the client library
(relay_client) and the API, as a client of Relay would; it never opens the database.

relay tx submit --to ADDR [--value WEI] [--data HEX] [--gas-limit N] [--speed S]
                [--valid-until RFC3339] [--idempotency-key K] [--wait [--timeout S]]
relay tx status ID
relay tx wait ID [--timeout S]
relay tx cancel ID [--wait [--timeout S]]
relay tx list [--status S] [--limit N]

Every command takes --json. The API and the key come from RELAY_API_URL and RELAY_API_KEY;
beside `make run` neither is needed: the API is http://127.0.0.1:$PORT (8000) and the key
the development key `make run` wrote to $RELAY_STATE_DIR/dev-api-key (.relay/).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any

from relay_api import devstate
from relay_api.exitcodes import (
    EXIT_NOT_CONFIRMED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_TIMEOUT,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
)

if TYPE_CHECKING:
    from relay_client import RelayClient, RelayError, Status

# relay_client.models.SPEEDS and STATUSES, written out so that parsing the command line does
# not import the client library (a test keeps them equal).
SPEEDS = ("safeLow", "average", "fast", "fastest")
STATUSES = (
    *("pending", "processing", "submitted", "mined"),
    *("canceled", "confirmed", "expired", "failed"),
)


def add_parsers(sub: Any) -> None:
    tx = sub.add_parser(
        "tx",
        help="submit and follow transactions through the API (RELAY_API_URL, RELAY_API_KEY)",
        description=__doc__.split("\n\n")[0],
    ).add_subparsers(dest="action", required=True)

    submit = tx.add_parser("submit", help="submit a direct transaction (202: made durable)")
    submit.add_argument("--to", required=True, help="recipient, 0x + 40 hex")
    submit.add_argument("--value", default="0", help="wei, a decimal integer (default 0)")
    submit.add_argument("--data", default="0x", help="calldata, even-length hex (default 0x)")
    submit.add_argument("--gas-limit", help="gas limit, a decimal integer")
    submit.add_argument("--speed", choices=SPEEDS, help="gas price speed (fast/fastest: fast lane)")
    submit.add_argument("--valid-until", help="RFC 3339 time after which it must not be sent")
    submit.add_argument("--idempotency-key", help="default: a new one (printed)")
    submit.add_argument("--wait", action="store_true", help="then wait until it is final")
    _wait_options(submit)

    status = tx.add_parser("status", help="one transaction as the API knows it now")
    status.add_argument("transaction_id", metavar="ID")

    wait = tx.add_parser("wait", help="wait until a transaction is final")
    wait.add_argument("transaction_id", metavar="ID")
    _wait_options(wait)

    cancel = tx.add_parser(
        "cancel", help="take back a transaction (at once if not sent yet; else at the executor)"
    )
    cancel.add_argument("transaction_id", metavar="ID")
    cancel.add_argument("--wait", action="store_true", help="then wait until it is final")
    _wait_options(cancel)

    listing = tx.add_parser("list", help="your transactions, newest first")
    listing.add_argument("--status", choices=STATUSES, help="only those in this status")
    listing.add_argument("--limit", type=int, default=20, help="most to show (default 20)")

    for command in (submit, status, wait, cancel, listing):
        command.add_argument("--json", action="store_true", help="JSON instead of a table")
        command.add_argument("--api-url", help="default: RELAY_API_URL, else the local API")
        command.add_argument("--api-key", help="default: RELAY_API_KEY, else make run's key")
        command.set_defaults(handler=run)


def _wait_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="seconds to wait (default 120)"
    )


def local_api_url() -> str:
    return f"http://127.0.0.1:{os.environ.get('PORT', '8000')}"


def dev_key() -> str | None:
    """The key `make run` made for development, if there is one here."""
    path = devstate.state_dir() / "dev-api-key"
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def run(args: argparse.Namespace) -> int:
    from relay_client import RelayClient, RelayError, WaitTimeout

    devstate.adopt()
    url = args.api_url or os.environ.get("RELAY_API_URL") or local_api_url()
    key = args.api_key or os.environ.get("RELAY_API_KEY") or dev_key()
    if not key:
        _err("no API key: set RELAY_API_KEY (beside `make run`, .relay/dev-api-key is read)")
        return EXIT_USAGE
    try:
        with RelayClient(url, key) as relay:
            return _run(relay, args)
    except WaitTimeout as exc:
        _err(exc.detail)
        return EXIT_TIMEOUT
    except RelayError as exc:
        _err(f"{url}: {exc}")
        return _exit_code(exc)


def _run(relay: RelayClient, args: argparse.Namespace) -> int:
    if args.action == "submit":
        accepted = relay.submit_direct(
            args.to,
            data=args.data,
            value=args.value,
            gas_limit=args.gas_limit,
            speed=args.speed,
            valid_until=args.valid_until,
            idempotency_key=args.idempotency_key,
        )
        if not args.wait:
            if args.json:
                _json(accepted)
            else:
                replayed = " (a replay: accepted before with this key)" if accepted.replayed else ""
                _out(f"accepted {accepted.transaction_id}{replayed}")
                _out(f"idempotency key {accepted.idempotency_key}")
            return EXIT_OK
        if not args.json:
            _out(f"accepted {accepted.transaction_id}; waiting")
        return _final(relay.wait(accepted.transaction_id, timeout_s=args.timeout), args.json)
    if args.action == "status":
        current = relay.status(args.transaction_id)
        _json(current) if args.json else _table([current])
        return EXIT_OK
    if args.action == "wait":
        return _final(relay.wait(args.transaction_id, timeout_s=args.timeout), args.json)
    if args.action == "cancel":
        result = relay.cancel(args.transaction_id)
        if args.json and not args.wait:
            _json(result)
            return EXIT_OK
        if not args.json:
            _out(f"{result.transaction_id}: cancel {result.cancel}, {result.status}")
            _out(result.detail)
        if not args.wait:
            return EXIT_OK
        return _final(relay.wait(args.transaction_id, timeout_s=args.timeout), args.json)
    shown: list[Status] = []
    for item in relay.transactions(status=args.status, page_size=min(max(args.limit, 1), 200)):
        if len(shown) >= args.limit:
            break
        shown.append(item)
    if args.json:
        _out(json.dumps([_plain(item) for item in shown], indent=2))
    else:
        _table(shown)
    return EXIT_OK


def _final(status: Status, as_json: bool) -> int:
    _json(status) if as_json else _table([status])
    if status.status != "confirmed" and status.error_message and not as_json:
        _err(f"{status.status}: {status.error_message}")
    return EXIT_OK if status.status == "confirmed" else EXIT_NOT_CONFIRMED


def _exit_code(exc: RelayError) -> int:
    if exc.status in (0, 502, 503, 504):
        return EXIT_UNREACHABLE
    if exc.status == 404:
        return EXIT_NOT_FOUND
    if exc.status in (400, 409, 413, 422):
        return EXIT_USAGE  # a cancel too late (409) included
    return EXIT_REFUSED  # 401, 403, 429


def _table(rows: list[Status]) -> None:
    if not rows:
        _out("no transactions")
        return
    _out(f"{'transaction':36}  {'status':10}  {'type':7}  {'created (UTC)':19}  hash / error")
    for row in rows:
        created = row.created_at.strftime("%Y-%m-%d %H:%M:%S")
        last = row.hash or row.error_message or ""
        _out(f"{row.transaction_id:36}  {row.status:10}  {row.type:7}  {created:19}  {last}")


def _plain(value: Any) -> dict[str, Any]:
    return {
        key: item.isoformat() if isinstance(item, datetime) else item
        for key, item in dataclasses.asdict(value).items()
    }


def _json(value: Any) -> None:
    _out(json.dumps(_plain(value), indent=2))


def _out(line: str) -> None:
    sys.stdout.write(line + "\n")


def _err(line: str) -> None:
    sys.stderr.write(f"relay tx: {line}\n")
