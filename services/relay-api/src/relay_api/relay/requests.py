"""What a submitted request becomes before it is accepted: its fields checked (400 naming the
field) and its row's contents prepared (:class:`NewTransaction`), and the forwarder's EIP-712
domain and nonces that gasless requests are signed for and checked against."""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from relay_api.relay.schemas import DirectRequest, GaslessRequest, Speed, parse_rfc3339
from relay_api.settings import ApiSettings
from relay_core import ethereum, evm
from relay_core.errors import BadRequest, NotFound, Unavailable
from relay_core.netguard import RefusedDestination
from relay_core.statuses import TxType

log = logging.getLogger(__name__)

_IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,255}")  # fullmatch: no trailing newline


@dataclass(frozen=True, slots=True)
class NewTransaction:
    type: TxType
    request: dict[str, Any]
    valid_until: datetime | None
    inflight_key: str | None = None
    callback_url: str | None = None
    lane: str = "normal"


# The speeds that ask for the fast lane; without `speed`, a request keeps the normal lane (and
# is executed at the executor's default, fast).
FAST_SPEEDS = frozenset({Speed.fast, Speed.fastest})


def check_idempotency_key(key: str | None, longest: int = 255) -> str | None:
    if key is None:
        return None
    if not _IDEMPOTENCY_KEY.fullmatch(key) or len(key) > longest:
        raise BadRequest(f"Idempotency-Key: must be 1-{longest} printable ASCII characters")
    return key


def _check_window(field: str, moment: datetime, settings: ApiSettings) -> datetime:
    now = datetime.now(UTC)
    if moment <= now:
        raise BadRequest(f"{field}: must be in the future")
    if moment > now + timedelta(seconds=settings.max_valid_for_s):
        raise BadRequest(f"{field}: must be at most {settings.max_valid_for_s} s from now")
    return moment.astimezone(UTC).replace(tzinfo=None)


def _check_gas(field: str, value: str, settings: ApiSettings) -> int:
    gas = int(value)
    if gas < 21000 or gas > settings.max_gas_limit:
        raise BadRequest(f"{field}: must be between 21000 and {settings.max_gas_limit}")
    return gas


def _check_data(field: str, value: str, settings: ApiSettings) -> None:
    if (len(value) - 2) // 2 > settings.max_data_bytes:
        raise BadRequest(f"{field}: must be at most {settings.max_data_bytes} bytes")


def prepare_direct(
    body: DirectRequest, settings: ApiSettings, request: dict[str, Any] | None = None
) -> NewTransaction:
    """``request``: ``body`` as stored, when it was dumped already (a batch's items, dumped
    at once)."""
    _check_data("data", body.data, settings)
    if body.gas_limit is not None:
        _check_gas("gasLimit", body.gas_limit, settings)
    valid_until = None
    if body.valid_until is not None:
        try:
            parsed = parse_rfc3339(body.valid_until)
        except ValueError as exc:
            raise BadRequest(f"validUntil: {exc}") from exc
        valid_until = _check_window("validUntil", parsed, settings)
    if request is None:
        request = body.model_dump(by_alias=True, mode="json", exclude={"callback_url"})
    asked_fast = "speed" in body.model_fields_set and takes_fast_lane(body.speed, settings)
    return NewTransaction(
        type=TxType.direct,
        request=request,
        valid_until=valid_until,
        callback_url=check_callback_url("callbackUrl", body.callback_url, settings),
        lane="fast" if asked_fast else "normal",
    )


def takes_fast_lane(speed: Speed, settings: ApiSettings) -> bool:
    """A transaction asked to go at ``speed`` is received from the fast lane (when it is on)."""
    return settings.fast_lane and speed in FAST_SPEEDS


def check_callback_url(field: str, url: str | None, settings: ApiSettings) -> str | None:
    """A callback URL Relay will call: not inside (see relay_core.netguard), https in
    production. 400 naming the field otherwise."""
    if url is None:
        return None
    try:
        return settings.callback_policy().check_url(url)
    except RefusedDestination as exc:
        raise BadRequest(f"{field}: {exc}") from exc


def check_address_param(address: str) -> str:
    try:
        return ethereum.check_address(address)
    except ValueError as exc:
        raise BadRequest(f"address: {exc}") from exc


def gasless_domain(settings: ApiSettings) -> ethereum.ForwarderDomain:
    domain = settings.forwarder_domain
    if domain is None:
        raise NotFound(
            "gasless relaying is not enabled on this deployment "
            "(RELAY_FORWARDER_ADDRESS and RELAY_CHAIN_ID are not set)"
        )
    return domain


def domain_view(domain: ethereum.ForwarderDomain) -> dict[str, Any]:
    """What a client signs for: the EIP-712 domain, the types and the primary type, in the
    shape eth_account's ``encode_typed_data(full_message=...)`` and wallets take."""
    return {
        "domain": {
            "name": domain.name,
            "version": domain.version,
            "chainId": domain.chain_id,
            "verifyingContract": domain.verifying_contract,
        },
        "types": ethereum.FORWARD_REQUEST_TYPES,
        "primaryType": "ForwardRequest",
    }


async def forwarder_nonce(
    rpc: evm.EvmRpc | None, domain: ethereum.ForwarderDomain, address: str
) -> int:
    """The nonce the forwarder expects next from ``address``, read from the chain."""
    if rpc is None:
        raise Unavailable("no chain RPC configured (RELAY_CHAIN_RPC_URL)")
    try:
        return await evm.forwarder_nonce(rpc, domain.verifying_contract, address)
    except (evm.RpcError, evm.RpcUnavailable) as exc:
        raise Unavailable(f"the chain did not answer: {exc}") from exc


async def check_nonce_unused(
    rpc: evm.EvmRpc | None, domain: ethereum.ForwarderDomain, new: NewTransaction
) -> None:
    """Refuse a nonce the forwarder has already consumed (it could only revert). Without a
    chain to ask, or if it does not answer, the consumer finds out before sending."""
    if rpc is None:
        return
    fwd = new.request["request"]
    try:
        current = await evm.forwarder_nonce(rpc, domain.verifying_contract, fwd["from"])
    except (evm.RpcError, evm.RpcUnavailable) as exc:
        log.warning("api.gasless.nonce_unchecked", extra={"error": str(exc)[:200]})
        return
    if int(fwd["nonce"]) < current:
        raise BadRequest(
            f"request.nonce: {fwd['nonce']} is already used; the forwarder expects {current} "
            f"next from {fwd['from']}"
        )


def prepare_gasless(body: GaslessRequest, settings: ApiSettings) -> NewTransaction:
    fwd = body.request
    _check_data("request.data", fwd.data, settings)
    _check_gas("request.gas", fwd.gas, settings)
    if fwd.deadline > time.time() + settings.max_valid_for_s:  # before it becomes a date
        raise BadRequest(f"request.deadline: must be at most {settings.max_valid_for_s} s from now")
    deadline = _check_window(
        "request.deadline", datetime.fromtimestamp(fwd.deadline, UTC), settings
    )
    forward = ethereum.ForwardRequest(
        sender=fwd.from_,
        to=fwd.to,
        value=int(fwd.value),
        gas=int(fwd.gas),
        nonce=int(fwd.nonce),
        deadline=fwd.deadline,
        data=fwd.data,
    )
    domain = gasless_domain(settings)
    try:
        signer = ethereum.recover_forward_request_signer(domain, forward, body.signature)
    except ValueError as exc:
        raise BadRequest(f"signature: {exc}") from exc
    if signer != fwd.from_:
        raise BadRequest("signature: not signed by request.from under the forwarder's domain")
    request = body.model_dump(by_alias=True, mode="json", exclude={"callback_url"})
    request["forwarder"] = domain.verifying_contract
    request["chainId"] = domain.chain_id
    return NewTransaction(
        type=TxType.gasless,
        request=request,
        valid_until=deadline,
        inflight_key=f"{fwd.from_.lower()}:{fwd.nonce}",
        callback_url=check_callback_url("callbackUrl", body.callback_url, settings),
    )
