"""Cancel, expiry and replace change a transaction that is not final yet: which states allow
them (upstream's ``ensure_status_one_of`` and its 400), and what a replace takes from its
body (upstream's ``EvmTransactionData::for_replacement``)."""

from __future__ import annotations

from relay_core.errors import BadRequest
from relayer_stub.lifecycle.pricing import DEFAULT_SPEED
from relayer_stub.transactions.models import CANCELABLE_STATUSES, Status, Transaction
from relayer_stub.transactions.schemas import SendRequest, signing_problem


def ensure_changeable(tx: Transaction, operation: str) -> None:
    """400 unless ``tx`` is pending, sent or submitted, worded as upstream words it."""
    if tx.status not in CANCELABLE_STATUSES:
        raise BadRequest(
            f"Invalid transaction state for {operation}. "
            f"Current: {tx.status.value.capitalize()}, "
            "Expected one of: [Pending, Sent, Submitted]"
        )


def ensure_replaceable(tx: Transaction, request: SendRequest) -> None:
    """As upstream, and one rule more: a canceled transaction keeps its cancel. Its no-op is
    on its way to the node, and a replace would quietly turn the cancel into a send.

    A transaction signed already is signed again within the request, as upstream does, so
    terms its signer cannot read are refused now; a pending one takes them and fails when it
    is signed, as a send does."""
    ensure_changeable(tx, "replace_transaction")
    if tx.is_canceled:
        raise BadRequest(
            "Invalid transaction state for replace_transaction. The transaction is canceled "
            "(is_canceled): a canceled transaction cannot be replaced"
        )
    problem = signing_problem(request.to, request.data)
    if problem is not None and tx.status is not Status.pending:
        raise BadRequest(problem)


def replacement_speed(tx: Transaction, request: SendRequest) -> str:
    """The request's speed, else the transaction's, else upstream's default."""
    return request.speed or tx.speed or DEFAULT_SPEED


def take_terms(tx: Transaction, request: SendRequest) -> None:
    """The replace's new terms: ``to``, ``value``, ``data``, the gas limit (the request's,
    else the one it had) and the speed. Prices are cleared, to be worked out again from the
    speed: explicit fee fields in the request are not carried over. The id, the nonce and
    ``valid_until`` stay (upstream replaces the transaction's network data only)."""
    tx.speed = replacement_speed(tx, request)
    tx.to = request.to
    tx.data = request.data
    tx.value = request.value
    if request.gas_limit is not None:
        tx.gas_limit = request.gas_limit
    tx.gas_price = tx.max_fee_per_gas = tx.max_priority_fee_per_gas = None
    if tx.is_noop:
        # An expiry's no-op replaced is a transaction again, and its reason no longer says
        # what it is. Its valid_until has passed, though: memory mode replaces it again.
        tx.is_noop = False
        tx.status_reason = None
