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
relay relayers [--json]               each relayer of the pool: state, in flight, balance
relay relayers pause RELAYER [--reason TEXT] | relay relayers resume RELAYER
                                      it takes no new work / takes work again
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
relay tx submit|status|wait|list      as a client, through the API (relay_api.cli.tx)

Beside a running `make run`, every command finds what it started (the database, SQS, the
executor, the chain, the API) with no environment set (relay_api.devstate); what the
environment sets always wins. One module per command group; each imports what it needs only
when it runs, so `relay --help` answers at once.

Exit codes: relay_api.exitcodes (docs/runbook.md#exit-codes).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from relay_api.cli import audit, clients, dlq, keys, maintenance, queues, relayers, serve, tx
from relay_api.cli.serve import serve_main

__all__ = ["build_parser", "main", "serve_main"]

# In the order `relay --help` lists them.
GROUPS = (maintenance, keys, clients, queues, relayers, dlq, audit, serve, tx)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="relay", description="Operate a Relay deployment.")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.handler(args)
    return code
