"""`relay-pipeline reconcile` against a fake JSON-RPC node (an HTTP server on 127.0.0.1 that
answers eth_getTransactionReceipt from a dict, batches included): each kind of mismatch, the
window, the sample, the batching, the paging."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from sqlalchemy import create_engine

from relay_core.db.models import Base
from relay_pipeline.cli import main
from relay_pipeline.database import database_from_url
from relay_pipeline.history.window import Window
from relay_pipeline.reconcile import repository, service
from relay_pipeline.reconcile.command import EXIT_MISMATCHES, EXIT_RPC
from relay_pipeline.reconcile.repository import Recorded

from ..conftest import T0, HistoryBuilder

CONFIRMED = [("processing", 10), ("submitted", 100), ("mined", 900), ("confirmed", 1000)]
SINCE, UNTIL = T0 - timedelta(hours=1), T0 + timedelta(hours=1)
WINDOW = ["--since", SINCE.isoformat(), "--until", UNTIL.isoformat()]


class FakeNode:
    """Receipts by hash; records every hash asked for and every HTTP request."""

    def __init__(self) -> None:
        self.receipts: dict[str, dict[str, Any]] = {}
        self.asked: list[str] = []
        self.requests = 0
        self.batches: list[int] = []
        node = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                calls = body if isinstance(body, list) else [body]
                node.requests += 1
                node.batches.append(len(calls))
                answers = []
                for call in calls:
                    assert call["method"] == "eth_getTransactionReceipt"
                    node.asked.append(call["params"][0])
                    result = node.receipts.get(call["params"][0])
                    answers.append({"jsonrpc": "2.0", "id": call["id"], "result": result})
                raw = json.dumps(answers if isinstance(body, list) else answers[0]).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def mine(self, tx_hash: str, block: int, gas_used: int, price: int, status: str = "0x1"):
        self.receipts[tx_hash] = {
            "transactionHash": tx_hash,
            "blockNumber": hex(block),
            "gasUsed": hex(gas_used),
            "effectiveGasPrice": hex(price),
            "status": status,
        }

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def node() -> Iterator[FakeNode]:
    fake = FakeNode()
    try:
        yield fake
    finally:
        fake.stop()


def _hash() -> str:
    return "0x" + uuid.uuid4().hex * 2


def confirmed(
    builder: HistoryBuilder,
    node: FakeNode | None,
    *,
    minutes: float = 0,
    block: int = 7,
    gas: int = 21_000,
    price: int = 1_000_000_007,
    **recorded: Any,
) -> tuple[str, str]:
    """A confirmed row whose cost columns say what ``node`` mined (``recorded`` overrides)."""
    tx_hash = _hash()
    tx_id = builder.tx(T0 + timedelta(minutes=minutes), CONFIRMED)
    values = {
        "hash": tx_hash,
        "block_number": block,
        "gas_used": gas,
        "effective_gas_price": str(price),
        "fee_wei": str(gas * price),
    }
    values.update(recorded)
    builder.transactions[-1].update(values)
    if node is not None:
        node.mine(tx_hash, block, gas, price)
    return tx_id, tx_hash


def _reconcile(url: str, node: FakeNode, *extra: str) -> int:
    return main(["reconcile", "--rpc-url", node.url, "--database-url", url, *WINDOW, *extra])


def test_every_kind_of_mismatch_is_named_with_its_transaction(scratch_mysql, history, node, capsys):
    fine = confirmed(history, node)
    unknown = confirmed(history, None)  # no receipt on this chain
    hashless = confirmed(history, node, hash=None)
    moved = confirmed(history, node, block_number=6)
    reverted = confirmed(history, node)
    node.receipts[reverted[1]]["status"] = "0x0"
    overcharged = confirmed(history, node, fee_wei="21000000000147001")
    unrecorded = confirmed(history, node, fee_wei=None, gas_used=None, effective_gas_price=None)
    mispriced = confirmed(history, node, effective_gas_price="1000000008")
    history.save()

    assert _reconcile(scratch_mysql.url, node, "--quiet") == EXIT_MISMATCHES
    printed = capsys.readouterr().out
    listed: dict[str, set[str]] = {}
    for line in printed.splitlines():
        kind, tx_id, *_ = line.split()
        if kind in service.KINDS:
            listed.setdefault(tx_id, set()).add(kind)
    assert listed == {
        unknown[0]: {"missing_receipt"},
        hashless[0]: {"missing_receipt"},
        moved[0]: {"block"},
        reverted[0]: {"status"},
        overcharged[0]: {"fee"},
        unrecorded[0]: {"fee"},
        mispriced[0]: {"fee"},
    }
    assert fine[0] not in listed
    assert "reconcile: 8 checked, 7 differ from the chain" in printed
    assert f"{overcharged[1]}  recorded fee 21000000000147001 wei" in printed


def test_all_matching_exits_0_and_only_the_windows_confirmed_rows_are_asked_for(
    scratch_mysql, history, node, capsys
):
    inside = {confirmed(history, node, minutes=m)[1] for m in (-50, 0, 59)}
    confirmed(history, node, minutes=60)  # until is exclusive
    confirmed(history, node, minutes=-61)
    history.tx(T0, [("processing", 10), ("submitted", 10)])  # not confirmed
    history.transactions[-1].update(
        hash=_hash(), block_number=None, gas_used=None, effective_gas_price=None, fee_wei=None
    )
    history.save()
    assert _reconcile(scratch_mysql.url, node, "--quiet") == 0
    assert set(node.asked) == inside
    assert "reconcile: 3 checked, all match the chain" in capsys.readouterr().out


def test_a_sample_checks_exactly_n_rows_and_its_seed_draws_the_same_ones_again(
    scratch_mysql, history, node, capsys
):
    for k in range(60):
        confirmed(history, node, minutes=k / 2)
    history.save()
    draws = []
    for seed in ("11", "11", "12"):
        node.asked.clear()
        assert _reconcile(scratch_mysql.url, node, "--sample", "15", "--seed", seed) == 0
        assert len(node.asked) == 15
        draws.append(set(node.asked))
    assert draws[0] == draws[1]
    assert draws[0] != draws[2]
    said = capsys.readouterr()
    assert "a sample of 15 of 60 confirmed transactions (--seed 11)" in said.err
    assert "reconcile: 15 checked, all match the chain" in said.out


def test_receipts_are_asked_for_in_batch_requests(scratch_mysql, history, node):
    for k in range(250):
        confirmed(history, node, minutes=k / 10)
    history.save()
    assert _reconcile(scratch_mysql.url, node, "--batch-size", "100", "--quiet") == 0
    assert sorted(node.batches) == [50, 100, 100]
    node.batches.clear()
    assert _reconcile(scratch_mysql.url, node, "--batch-size", "1", "--quiet") == 0
    assert node.batches == [1] * 250  # a node that takes no batches is asked one at a time


def test_a_node_that_does_not_answer_is_not_reported_as_mismatches(
    scratch_mysql, history, node, capsys
):
    confirmed(history, node)
    history.save()
    url = node.url
    node.stop()
    code = main(["reconcile", "--rpc-url", url, "--database-url", scratch_mysql.url, *WINDOW])
    assert code == EXIT_RPC
    assert "the node could not be asked" in capsys.readouterr().err


@pytest.mark.parametrize("dialect", ["mysql", "sqlite"])
def test_pages_continue_after_rows_of_the_same_instant(dialect, scratch_mysql, tmp_path):
    """Keyset paging on (created_at, id): rows sharing a created_at across a page boundary
    are each read once."""
    if dialect == "sqlite":
        url = f"sqlite:///{tmp_path / 'relay.db'}"
        engine = create_engine(url)
        Base.metadata.create_all(engine)
    else:
        url, engine = scratch_mysql.url, scratch_mysql.engine
    builder = HistoryBuilder(engine)
    for k in range(23):
        confirmed(builder, None, minutes=k // 5)  # five rows per instant
    ids = {t["id"] for t in builder.transactions}
    builder.save()
    read = list(repository.confirmed(database_from_url(url), Window(SINCE, UNTIL), page=3))
    assert len(read) == 23
    assert {r.id for r in read} == ids
    assert repository.count_confirmed(database_from_url(url), Window(SINCE, UNTIL)) == 23
    if dialect == "sqlite":
        engine.dispose()


def test_sampling_is_uniform_and_keeps_the_original_order():
    rows = [Recorded(f"{k:04d}", None, None, None, None, None) for k in range(1000)]
    picked = service.sample(rows, 100, seed=3)
    assert len(picked) == 100 == len({r.id for r in picked})
    assert [r.id for r in picked] == sorted(r.id for r in picked)
    assert service.sample(rows, 100, seed=3) == picked
    # Every position is as likely to be drawn: over many seeds, each tenth of the rows
    # supplies about a tenth of the sample.
    tenths = [0] * 10
    for seed in range(200):
        for row in service.sample(rows, 100, seed):
            tenths[int(row.id) // 100] += 1
    assert all(1700 <= n <= 2300 for n in tenths), tenths
    assert service.sample(rows[:5], 100, seed=1) == rows[:5]
