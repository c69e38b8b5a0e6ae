"""``relay tx``: submit and follow transactions from a terminal, through the client library
(relay_client) and the API, as a client of Relay would; it never opens the database.

relay tx submit --to ADDR [--value WEI] [--data HEX] [--gas-limit N] [--speed S]
                [--valid-until RFC3339] [--idempotency-key K] [--wait [--timeout S]]
relay tx status ID
relay tx wait ID [--timeout S]
relay tx cancel ID [--wait [--timeout S]]
relay tx speed-up ID --speed S [--wait [--timeout S]]
relay tx batch FILE.jsonl [--idempotency-key K] [--wait [--timeout S]]
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
import re
import sys
import uuid
from collections import Counter
from datetime import datetime
from pathlib import Path
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

    speed_up = tx.add_parser(
        "speed-up", help="send a transaction at another speed (replaced at the executor if sent)"
    )
    speed_up.add_argument("transaction_id", metavar="ID")
    speed_up.add_argument("--speed", choices=SPEEDS, required=True, help="the new speed")
    speed_up.add_argument("--wait", action="store_true", help="then wait until it is final")
    _wait_options(speed_up)

    batch = tx.add_parser(
        "batch", help="submit a file of direct transactions, one JSON object a line, 100 a request"
    )
    batch.add_argument(
        "file",
        metavar="FILE.jsonl",
        help='one request a line, as POST /relay/direct takes it; "-" reads stdin',
    )
    batch.add_argument(
        "--idempotency-key",
        help="default: a new one (printed); the same key again answers what was accepted",
    )
    batch.add_argument("--wait", action="store_true", help="then wait until all are final")
    _wait_options(batch)

    listing = tx.add_parser("list", help="your transactions, newest first")
    listing.add_argument("--status", choices=STATUSES, help="only those in this status")
    listing.add_argument("--limit", type=int, default=20, help="most to show (default 20)")

    for command in (submit, status, wait, cancel, speed_up, batch, listing):
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
        if args.json:
            _json(current)
        else:
            _table([current])
            _cost(current)
        return EXIT_OK
    if args.action == "wait":
        return _final(relay.wait(args.transaction_id, timeout_s=args.timeout), args.json)
    if args.action == "batch":
        return _batch(relay, args)
    if args.action == "speed-up":
        sped = relay.speed_up(args.transaction_id, args.speed)
        if args.json and not args.wait:
            _json(sped)
            return EXIT_OK
        if not args.json:
            hash_now = f", hash {sped.hash}" if sped.hash else ""
            _out(f"{sped.transaction_id}: speed-up {sped.speed_up} ({sped.speed}){hash_now}")
            _out(sped.detail)
        if not args.wait:
            return EXIT_OK
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


def _batch(relay: RelayClient, args: argparse.Namespace) -> int:
    """Send the file's lines 100 at a time (each request a batch, all of it accepted or none);
    request ``n`` is keyed ``<key>/<n>``, so running the command again with the key answers
    what was accepted and sends the rest. A refusal names the file's line."""
    from relay_client import RelayError

    try:
        lines = _read_jsonl(args.file)
    except (OSError, ValueError) as exc:
        _err(str(exc))
        return EXIT_USAGE
    key = args.idempotency_key or str(uuid.uuid4())
    if not args.json:
        _out(f"{len(lines)} transactions from {args.file}; idempotency key {key}")
    accepted: list[tuple[int, Any]] = []
    chunks = [lines[start : start + BATCH] for start in range(0, len(lines), BATCH)]
    for number, chunk in enumerate(chunks):
        try:
            answers = relay.submit_batch(
                [request for _, request in chunk], idempotency_key=f"{key}/{number}"
            )
        except RelayError as exc:
            _err(f"{args.file}: {_at_line(exc, chunk)}")
            if accepted:
                _err(
                    f"the {len(accepted)} before line {chunk[0][0]} were accepted; fix the file "
                    f"and run again with --idempotency-key {key}: they are not sent twice"
                )
            return _exit_code(exc)
        accepted.extend(zip([line for line, _ in chunk], answers, strict=True))
        if not args.json:
            _out(
                f"request {number + 1}/{len(chunks)}: lines {chunk[0][0]}-{chunk[-1][0]} "
                f"accepted{' (a replay)' if answers[0].replayed else ''}"
            )
    if not args.wait:
        if args.json:
            _out(json.dumps([{"line": n, **_plain(a)} for n, a in accepted], indent=2))
        else:
            for line, answer in accepted:
                _out(f"line {line}: {answer.transaction_id}")
        return EXIT_OK
    finals = [relay.wait(answer.transaction_id, timeout_s=args.timeout) for _, answer in accepted]
    if args.json:
        _out(
            json.dumps(
                [{"line": n, **_plain(f)} for (n, _), f in zip(accepted, finals, strict=True)],
                indent=2,
            )
        )
    else:
        _table(finals)
    counts = Counter(final.status for final in finals)
    if not args.json:
        _out(", ".join(f"{count} {status}" for status, count in sorted(counts.items())))
    return EXIT_OK if set(counts) == {"confirmed"} else EXIT_NOT_CONFIRMED


BATCH = 100  # the API's most per request


def _read_jsonl(path: str) -> list[tuple[int, dict[str, Any]]]:
    """The file's requests with their line numbers (blank lines skipped)."""
    text = sys.stdin.read() if path == "-" else Path(path).read_text()
    requests = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{path}: line {number}: not JSON ({exc})") from None
        if not isinstance(request, dict):
            raise ValueError(f"{path}: line {number}: not a JSON object")
        requests.append((number, request))
    if not requests:
        raise ValueError(f"{path}: no transactions")
    return requests


def _at_line(exc: RelayError, chunk: list[tuple[int, dict[str, Any]]]) -> str:
    """The API's refusal of ``transactions.<index>`` of ``chunk`` told by the file's line."""
    found = re.match(r"transactions\.(\d+)[.:]\s*", exc.detail or "")
    if found is None or int(found[1]) >= len(chunk):
        return str(exc)
    line = chunk[int(found[1])][0]
    return f"line {line}: {exc.status} {exc.error}: {exc.detail[found.end() :]}"


def _final(status: Status, as_json: bool) -> int:
    if as_json:
        _json(status)
    else:
        _table([status])
        _cost(status)
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


def _cost(status: Status) -> None:
    """What it cost, below its row, as far as Relay has read it from its receipt."""
    shown = (
        ("block", status.block_number, ""),
        ("gas used", status.gas_used, ""),
        ("gas price", status.effective_gas_price, " wei"),
        ("fee", status.fee_wei, " wei"),
    )
    for label, value, unit in shown:
        if value is not None:
            _out(f"{label + ':':11}{value}{unit}")


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
