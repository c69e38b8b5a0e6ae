"""Routes under /api/v1/relay."""

from __future__ import annotations

import time
import uuid
from typing import Annotated

from fastapi import APIRouter, Header, Path, Query

from relay_api import metrics
from relay_api.auth.service import Caller
from relay_api.deps import CallerDep, JsonBody, RuntimeDep, UowDep, in_unit_of_work, unit_of_work
from relay_api.openapi import AUTHENTICATED, WITH_BODY, errors
from relay_api.relay import batch as batch_service
from relay_api.relay import cancel, requests, service, speedup
from relay_api.relay.schemas import (
    AcceptedResponse,
    BatchRequest,
    BatchResponse,
    CancelRefused,
    CancelResponse,
    DirectRequest,
    DomainResponse,
    GaslessRequest,
    NonceResponse,
    SpeedUpRequest,
    SpeedUpResponse,
    StatusResponse,
    TransactionPage,
)
from relay_api.responses import Json
from relay_api.runtime import Runtime
from relay_core.errors import BadRequest
from relay_core.statuses import TxStatus

router = APIRouter(prefix="/api/v1/relay", tags=["relay"])

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description="Same key and body within a client → the original 202 again; 1-255 "
        "printable ASCII characters (another key is refused with 400)",
        # Stated for clients and generators; the check is relay_api.relay.requests' (a 400,
        # the same on the fast path), not FastAPI's (which would answer 422).
        json_schema_extra={"pattern": "^[!-~]{1,255}$", "minLength": 1, "maxLength": 255},
    ),
]

# A batch's items are keyed "<key> <index>" (relay_api.relay.service.accept_batch): 252 + 3.
BatchIdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description="Same key and batch within a client → the original 202 again, item by "
        "item; 1-252 printable ASCII characters (another key is refused with 400)",
        json_schema_extra={"pattern": "^[!-~]{1,252}$", "minLength": 1, "maxLength": 252},
    ),
]

SUBMIT_ERRORS_NOTES = {
    400: "Semantic error naming the field (an EIP-55 checksum, the signature, a deadline, "
    "gas...), or not JSON",
    403: "policy_refused, naming the rule of the client's spend policy that refuses it: "
    "noPolicy (none granted yet: a new key submits nothing), revoked, allowedTo, maxValueWei, "
    "dailyValueWei, maxGas, gaslessValue, speeds, maxFeeWei, dailyFeeWei (the most the "
    "transaction can cost in fees: its gas limit times the highest fee per gas of its speed); "
    "or forbidden: an admin or operator key, which manages and does not submit",
    409: "Idempotency-Key reused with another body, or nonce in flight",
}
SUBMIT_ERRORS = errors(*AUTHENTICATED, *WITH_BODY, notes=SUBMIT_ERRORS_NOTES)
GASLESS_OFF = {404: "Gasless relaying is not enabled on this deployment"}


def _accepted(result: service.Accepted, kind: str, started: float) -> Json:
    outcome = "replayed" if result.replayed else "accepted"
    metrics.ACCEPT_SECONDS.observe(kind, outcome, time.perf_counter() - started)
    headers = {"Location": f"/api/v1/relay/status/{result.transaction_id}"}
    if result.replayed:
        headers["Idempotent-Replayed"] = "true"
    return Json(result.body(), status_code=202, headers=headers)


@router.post(
    "/direct",
    status_code=202,
    response_model=AcceptedResponse,
    responses=SUBMIT_ERRORS,
    dependencies=[JsonBody],
    operation_id="submitDirect",
)
async def submit_direct(
    body: DirectRequest,
    caller: CallerDep,
    runtime: RuntimeDep,
    idempotency_key: IdempotencyKey = None,
) -> Json:
    """Accept a transaction to send as is. Answers 202 once the request is durable."""
    return await accept_direct(body, caller, runtime, idempotency_key)


async def accept_direct(
    body: DirectRequest, caller: Caller, runtime: Runtime, idempotency_key: str | None
) -> Json:
    """The route's work, also run by ``relay_api.fastpath`` for well-formed requests."""
    key = requests.check_idempotency_key(idempotency_key)
    new = requests.prepare_direct(body, runtime.settings)
    started = time.perf_counter()
    accepted = await _accept(runtime, caller, new, key)
    return _accepted(accepted, "direct", started)


async def _accept(
    runtime: Runtime, caller: Caller, new: requests.NewTransaction, key: str | None
) -> service.Accepted:
    return await in_unit_of_work(
        runtime,
        lambda uow: service.accept(
            uow,
            caller,
            new,
            key,
            runtime.budgets,
            runtime.fees,
            runtime.settings.forwarder_gas_overhead,
        ),
    )


@router.post(
    "/batch",
    status_code=202,
    response_model=BatchResponse,
    responses=errors(
        *AUTHENTICATED,
        *WITH_BODY,
        notes={
            **SUBMIT_ERRORS_NOTES,
            400: "A transaction that is not acceptable, named by its index (transactions.3.data: "
            "...), or more transactions than the client's rate-limit burst",
            403: f"{SUBMIT_ERRORS_NOTES[403]}. A rule refusing one transaction names its index",
            409: "Idempotency-Key reused with another batch, naming the first item that differs",
            422: "Not a batch of 1-100 direct transactions; the field names the item's index",
        },
    ),
    dependencies=[JsonBody],
    operation_id="submitBatch",
)
async def submit_batch(
    body: BatchRequest,
    caller: CallerDep,
    runtime: RuntimeDep,
    idempotency_key: BatchIdempotencyKey = None,
) -> Json:
    """Accept up to 100 direct transactions in one request: all of them or none.
    Each is checked as ``POST /relay/direct`` checks one (a refusal names its index), counted
    by the rate limit and the spend policy, and written in one database transaction; 202 with
    one result per transaction, in the request's order. With an Idempotency-Key, sending the
    same batch again answers each transaction as it was accepted."""
    key = requests.check_idempotency_key(idempotency_key, longest=252)
    caller.ensure_submits()
    count = len(body.transactions)
    limit = caller.limit or runtime.default_limit
    if count > limit.burst:
        raise BadRequest(
            f"transactions: {count} are more than this client's rate-limit burst of "
            f"{limit.burst}; send at most {limit.burst} at once"
        )
    stored = body.model_dump(  # all at once: half the CPU of a dump per item
        by_alias=True, mode="json", exclude={"transactions": {"__all__": {"callback_url"}}}
    )["transactions"]
    batch = []
    for index, item in enumerate(body.transactions):
        try:
            batch.append(requests.prepare_direct(item, runtime.settings, stored[index]))
        except BadRequest as exc:
            raise BadRequest(f"transactions.{index}.{exc.detail}") from None
    if count > 1:  # the request itself took one token
        (await runtime.limiter.take_many(caller.id, limit, count - 1)).enforce(
            f"client {caller.name}"
        )
    started = time.perf_counter()
    results = await in_unit_of_work(
        runtime,
        lambda uow: batch_service.accept_batch(
            uow,
            caller,
            batch,
            key,
            runtime.budgets,
            runtime.fees,
            runtime.settings.forwarder_gas_overhead,
        ),
    )
    replayed = all(result.replayed for result in results)
    metrics.ACCEPT_SECONDS.observe(
        "batch", "replayed" if replayed else "accepted", time.perf_counter() - started
    )
    headers = {"Idempotent-Replayed": "true"} if replayed else None
    return Json(
        {"results": [result.body() for result in results]}, status_code=202, headers=headers
    )


@router.post(
    "/gasless",
    status_code=202,
    response_model=AcceptedResponse,
    responses=errors(*AUTHENTICATED, *WITH_BODY, notes={**SUBMIT_ERRORS_NOTES, **GASLESS_OFF}),
    dependencies=[JsonBody],
    operation_id="submitGasless",
)
async def submit_gasless(
    body: GaslessRequest,
    caller: CallerDep,
    runtime: RuntimeDep,
    idempotency_key: IdempotencyKey = None,
) -> Json:
    """Accept an EIP-712 signed ERC-2771 ForwardRequest; it is executed through the forwarder,
    in nonce order per signer. Sign for the domain of ``GET /relay/gasless/domain`` with the
    nonce of ``GET /relay/gasless/nonce/{address}`` (then the next ones)."""
    key = requests.check_idempotency_key(idempotency_key)
    new = requests.prepare_gasless(body, runtime.settings)
    started = time.perf_counter()
    await requests.check_nonce_unused(runtime.rpc, requests.gasless_domain(runtime.settings), new)
    accepted = await _accept(runtime, caller, new, key)
    return _accepted(accepted, "gasless", started)


@router.get(
    "/gasless/domain",
    response_model=DomainResponse,
    responses=errors(*AUTHENTICATED, notes=GASLESS_OFF),
    operation_id="getGaslessDomain",
)
async def gasless_domain(caller: CallerDep, runtime: RuntimeDep) -> Json:
    """The EIP-712 domain and types a gasless request must be signed for."""
    return Json(requests.domain_view(requests.gasless_domain(runtime.settings)))


@router.get(
    "/gasless/nonce/{address}",
    response_model=NonceResponse,
    responses=errors(
        *AUTHENTICATED,
        422,
        notes={
            **GASLESS_OFF,
            400: "Not an address (a mixed-case one must carry its EIP-55 checksum)",
            503: "No chain RPC configured, or it did not answer",
        },
    ),
    operation_id="getGaslessNonce",
)
async def gasless_nonce(
    address: Annotated[str, Path(pattern=r"^0x[0-9a-fA-F]{40}$")],
    caller: CallerDep,
    runtime: RuntimeDep,
) -> Json:
    """The nonce the forwarder expects next from ``address``, read from the chain."""
    domain = requests.gasless_domain(runtime.settings)
    checked = requests.check_address_param(address)
    nonce = await requests.forwarder_nonce(runtime.rpc, domain, checked)
    return Json({"address": checked, "nonce": str(nonce)})


@router.get(
    "/status/{transactionId}",
    response_model=StatusResponse,
    responses=errors(*AUTHENTICATED, 422, notes={404: "Unknown id, or another client's"}),
    operation_id="getStatus",
)
async def get_status(
    transaction_id: Annotated[uuid.UUID, Path(alias="transactionId")],
    caller: CallerDep,
    runtime: RuntimeDep,
) -> Json:
    """Status from Redis, else MySQL (which backfills Redis), refreshed from the executor when
    it is not final and not fresh. ``X-Cache`` names the tier: hit, miss or upstream."""
    return await read_status(str(transaction_id), caller, runtime)


async def read_status(transaction_id: str, caller: Caller, runtime: Runtime) -> Json:
    """The route's work, also run by ``relay_api.fastpath`` for a well-formed id (given in
    its canonical lower-case form)."""
    started = time.perf_counter()
    entry = await service.cached_status(runtime.cache, caller, transaction_id)
    tier = "hit"
    if entry is None:  # a unit of work only for the tiers that need the database
        async with unit_of_work(runtime) as uow:
            entry, tier = await service.status(
                uow.session, runtime.cache, runtime.refresher, caller, transaction_id
            )
    metrics.STATUS_SECONDS.observe(tier, time.perf_counter() - started)
    return Json(service.public(entry), headers={"X-Cache": tier})


@router.delete(
    "/transactions/{transactionId}",
    response_model=CancelResponse,
    responses={
        **errors(
            *AUTHENTICATED,
            422,
            notes={
                403: "An admin or operator key: they submit nothing, so cancel nothing",
                404: "Unknown id, or another client's",
            },
        ),
        202: {
            "model": CancelResponse,
            "description": "Under way: a consumer is sending it (requested), or the executor "
            "is replacing it with a no-op (sent); its status says how it ends",
        },
        409: {"model": CancelRefused, "description": "Too late: mined, or final"},
    },
    operation_id="cancelTransaction",
)
async def cancel_transaction(
    transaction_id: Annotated[uuid.UUID, Path(alias="transactionId")],
    caller: CallerDep,
    runtime: RuntimeDep,
) -> Json:
    """Take back one of your transactions. Not yet sent (waiting for a consumer, held for its
    signer's nonce turn, in a paused lane): canceled at once (200), and never sent. Being sent
    by a consumer, or at the executor and not yet mined: the executor's cancel, which replaces
    it with a no-op at its nonce (202; ``canceled`` once that is mined, or ``confirmed`` if the
    original is mined first). Mined or final: 409 with its status (canceled: 200 again). Safe
    to retry; every change is an event and a callback."""
    caller.ensure_submits()
    answer = await cancel.cancel(runtime, caller, str(transaction_id))
    return Json(answer.body(str(transaction_id)), status_code=answer.http_status)


@router.post(
    "/transactions/{transactionId}/speed-up",
    response_model=SpeedUpResponse,
    responses=errors(
        *AUTHENTICATED,
        *WITH_BODY,
        notes={
            403: "policy_refused: the client's spend policy refuses the new speed (speeds, "
            "maxFeeWei, or dailyFeeWei: more than the fee reserved for it at accept); or an "
            "admin or operator key",
            404: "Unknown id, or another client's",
            409: "Being sent by a consumer (ask again once submitted), a cancel under way, or "
            "mined or final (too late)",
            503: "The executor did not answer; nothing changed",
        },
    ),
    dependencies=[JsonBody],
    operation_id="speedUpTransaction",
)
async def speed_up_transaction(
    transaction_id: Annotated[uuid.UUID, Path(alias="transactionId")],
    body: SpeedUpRequest,
    caller: CallerDep,
    runtime: RuntimeDep,
) -> Json:
    """Send one of your transactions at another speed. Not sent yet: it will be sent at that
    speed (fast and fastest move it to the fast lane). At the executor and not yet mined: the
    executor's replace, the same transaction at its nonce priced anew (its hash changes; the
    status follows). Being sent, mined or final: 409. Safe to retry."""
    caller.ensure_submits()
    answer = await speedup.speed_up(runtime, caller, str(transaction_id), body.speed)
    return Json(answer.body(str(transaction_id)))


@router.get(
    "/transactions",
    response_model=TransactionPage,
    responses=errors(*AUTHENTICATED, 422, notes={400: "A cursor this API did not return"}),
    operation_id="listTransactions",
)
async def list_transactions(
    caller: CallerDep,
    uow: UowDep,
    status: TxStatus | None = None,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> Json:
    """The caller's own transactions, newest first. Pass ``nextCursor`` back as ``cursor``."""
    items, next_cursor = await service.list_transactions(uow.session, caller, status, cursor, limit)
    return Json({"items": items, "nextCursor": next_cursor})
