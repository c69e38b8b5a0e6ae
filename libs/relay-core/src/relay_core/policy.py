"""Spend policies: what a client may make the relayer's wallet pay for.

Every transaction Relay executes is paid from the relayer's wallet (gas always, and the
``value`` of direct and gasless requests alike), so nothing spends unless someone chose that it
may: a client may submit nothing until an operator grants it a policy (``relay keys create``
with its options, ``relay clients policy``, ``PATCH /api/v1/admin/clients/{id}``; the rule
``noPolicy`` until then). A policy is:

- ``allowedTo``: destination contracts it may call (a gasless request's ``request.to``); empty
  means any;
- ``maxValueWei``: the most ``value`` one transaction may carry;
- ``dailyValueWei``: the most ``value`` its transactions may carry in any rolling 24 hours;
- ``maxGas``: the highest gas limit (a direct request must then name its ``gasLimit``);
- ``gaslessValue``: whether a gasless request may carry ``value`` at all (off by default:
  the signer asks for it, the relayer pays it);
- ``maxFeeWei``: the most fee one transaction may cost: its gas limit times the most a unit of
  gas can cost at its speed (relay_core.fees), judged at accept (a direct request must then
  name its ``gasLimit``);
- ``dailyFeeWei``: the most fee its transactions may cost in any rolling 24 hours: reserved at
  accept at that most, settled to the receipt's fee (gas used x effective price) once mined;
- ``speeds``: the speeds it may ask for (empty: any; ``fastest`` pays twice ``safeLow``'s).

The rules about one transaction are checked at accept (403 naming the rule) and again by the
consumer just before it submits, against the policy as it is then: an operator who tightens a
policy after a leak stops what is already queued.

The daily budgets are counted by relay_core.spending.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from relay_core import fees
from relay_core.db.models import ApiClient, utcnow
from relay_core.errors import Forbidden
from relay_core.statuses import TxType

# The forwarder's own gas above a gasless request's (RELAY_FORWARDER_GAS_OVERHEAD's default).
FORWARDER_GAS_OVERHEAD = 60_000


class PolicyRefused(Forbidden):
    """A spend policy refuses the transaction; ``rule`` names it."""

    code = "policy_refused"

    def __init__(self, rule: str, detail: str) -> None:
        super().__init__(f"policy {rule}: {detail}")
        self.rule = rule


@dataclass(frozen=True, slots=True)
class Spend:
    """What a transaction asks the wallet for: its ``value``, the ``gas`` its request names
    (``maxGas`` judges it), its ``speed``, and ``fee``, the most it can cost in fees (None:
    unknown, its gas limit is not named, or no price was given)."""

    type: TxType
    to: str
    value: int
    gas: int | None
    speed: str = fees.DEFAULT_SPEED
    fee: int | None = None

    @classmethod
    def of(
        cls,
        type_: TxType | str,
        request: dict[str, Any],
        *,
        fee_per_gas: int | None = None,
        forwarder_overhead: int = FORWARDER_GAS_OVERHEAD,
    ) -> Spend:
        """From a stored (or about to be stored) request; ``fee_per_gas``: the most a unit of
        gas can cost at its speed, to work out ``fee``."""
        if type_ == TxType.gasless:  # (a StrEnum: the stored type's text compares equal)
            fwd = request["request"]
            gas = int(fwd["gas"])
            # The forwarder's execute: the request's gas and the forwarder's own, at the
            # speed the consumer sends gasless requests with (fast, or a speed-up's).
            sent = gas + forwarder_overhead
            fee = None if fee_per_gas is None else sent * fee_per_gas
            speed = str(request.get("speed") or "fast")
            return cls(TxType.gasless, str(fwd["to"]), int(fwd["value"]), gas, speed, fee)
        if type_ != TxType.direct:
            raise ValueError(f"{type_!r} is not a transaction type")
        named = request.get("gasLimit")
        gas_limit = int(named) if named else None
        return cls(
            TxType.direct,
            str(request["to"]),
            int(request.get("value") or 0),
            gas_limit,
            str(request.get("speed") or fees.DEFAULT_SPEED),
            None if fee_per_gas is None else fees.fee_of(gas_limit, fee_per_gas),
        )


@dataclass(frozen=True, slots=True)
class SpendPolicy:
    granted: bool = False  # an operator chose that this client may spend (else: nothing)
    revoked: bool = False  # its key was revoked: nothing it queued is sent any more
    allowed_to: frozenset[str] = frozenset()  # lowercase; empty: any
    max_value_wei: int | None = None
    daily_value_wei: int | None = None
    max_gas: int | None = None
    gasless_value: bool = False
    max_fee_wei: int | None = None
    daily_fee_wei: int | None = None
    speeds: frozenset[str] = frozenset()  # empty: any

    @classmethod
    def of(cls, client: ApiClient) -> SpendPolicy:
        return cls(
            granted=client.policy_granted_at is not None,
            revoked=client.revoked_at is not None,
            allowed_to=frozenset(a.lower() for a in client.policy_allowed_to or ()),
            max_value_wei=_int(client.policy_max_value_wei),
            daily_value_wei=_int(client.policy_daily_value_wei),
            max_gas=client.policy_max_gas,
            gasless_value=bool(client.policy_gasless_value),
            max_fee_wei=_int(client.policy_max_fee_wei),
            daily_fee_wei=_int(client.policy_daily_fee_wei),
            speeds=frozenset(client.policy_speeds or ()),
        )

    @property
    def prices_fees(self) -> bool:
        """Whether a transaction's most fee must be known to judge it (a fee rule is set)."""
        return self.max_fee_wei is not None or self.daily_fee_wei is not None

    @property
    def unlimited(self) -> bool:
        """Granted with no limit at all: any destination, value, gas and fee (flagged to
        operators)."""
        return self.granted and not (
            self.allowed_to
            or self.max_value_wei is not None
            or self.daily_value_wei is not None
            or self.max_gas is not None
            or self.prices_fees
        )

    def check(self, spend: Spend) -> None:
        """The rules about this one transaction; :class:`PolicyRefused` naming the first
        broken."""
        if self.revoked:
            raise PolicyRefused(
                "revoked", "this client's key was revoked: nothing it queued is sent"
            )
        if not self.granted:
            raise PolicyRefused(
                "noPolicy",
                "this client has no spend policy yet, so it may submit nothing: an operator "
                "grants one (relay clients policy NAME ..., or PATCH /api/v1/admin/clients/NAME)",
            )
        if self.allowed_to and spend.to.lower() not in self.allowed_to:
            raise PolicyRefused(
                "allowedTo", f"{spend.to} is not among this client's allowed destinations"
            )
        if spend.type == TxType.gasless and spend.value > 0 and not self.gasless_value:
            raise PolicyRefused(
                "gaslessValue",
                "a gasless request may not carry value (the relayer would pay it); "
                "an operator can allow it for this client",
            )
        if self.max_value_wei is not None and spend.value > self.max_value_wei:
            raise PolicyRefused(
                "maxValueWei",
                f"value {spend.value} is above this client's {self.max_value_wei} wei "
                "per transaction",
            )
        if self.max_gas is not None:
            if spend.gas is None:
                raise PolicyRefused(
                    "maxGas", f"gasLimit is required (this client's limit is {self.max_gas})"
                )
            if spend.gas > self.max_gas:
                raise PolicyRefused(
                    "maxGas", f"gas {spend.gas} is above this client's limit of {self.max_gas}"
                )
        if self.speeds and spend.speed not in self.speeds:
            raise PolicyRefused(
                "speeds",
                f"speed {spend.speed} is not among this client's: "
                + ", ".join(sorted(self.speeds)),
            )
        if self.prices_fees:
            rule = "maxFeeWei" if self.max_fee_wei is not None else "dailyFeeWei"
            if spend.fee is None:
                raise PolicyRefused(
                    rule,
                    "gasLimit is required: this client's fee budget reserves the gas limit "
                    "times the most a unit of gas can cost at its speed",
                )
            if self.max_fee_wei is not None and spend.fee > self.max_fee_wei:
                raise PolicyRefused(
                    "maxFeeWei",
                    f"this transaction may cost up to {spend.fee} wei in fees (its gas limit at "
                    f"{spend.speed}), above this client's {self.max_fee_wei} wei per transaction",
                )

    def view(self) -> dict[str, Any]:
        """The policy as the API and the CLI show it (wei as decimal strings)."""
        return {
            "granted": self.granted,
            "unlimited": self.unlimited,
            "allowedTo": sorted(self.allowed_to),
            "maxValueWei": _str(self.max_value_wei),
            "dailyValueWei": _str(self.daily_value_wei),
            "maxGas": self.max_gas,
            "gaslessValue": self.gasless_value,
            "maxFeeWei": _str(self.max_fee_wei),
            "dailyFeeWei": _str(self.daily_fee_wei),
            "speeds": sorted(self.speeds),
        }


NO_POLICY = SpendPolicy()  # what a new client has: nothing may be spent

# The fields of a policy as the API, the CLI and the audit log name them.
FIELDS = (
    "allowedTo",
    "maxValueWei",
    "dailyValueWei",
    "maxGas",
    "gaslessValue",
    "maxFeeWei",
    "dailyFeeWei",
    "speeds",
)


def apply(client: ApiClient, changes: dict[str, Any], *, granted_by: str) -> None:
    """Set the fields of ``changes`` (keys as in :data:`FIELDS`; None clears a limit, an empty
    list allows any destination) and, if it had none, grant the client its policy. Values are
    checked by the caller."""
    if client.policy_granted_at is None:
        client.policy_granted_at = utcnow()
        client.policy_granted_by = granted_by[:200]
    if "allowedTo" in changes:
        client.policy_allowed_to = sorted({a.lower() for a in changes["allowedTo"] or ()}) or None
    if "maxValueWei" in changes:
        client.policy_max_value_wei = _str(changes["maxValueWei"])
    if "dailyValueWei" in changes:
        client.policy_daily_value_wei = _str(changes["dailyValueWei"])
    if "maxGas" in changes:
        client.policy_max_gas = changes["maxGas"]
    if "gaslessValue" in changes:
        client.policy_gasless_value = bool(changes["gaslessValue"])
    if "maxFeeWei" in changes:
        client.policy_max_fee_wei = _str(changes["maxFeeWei"])
    if "dailyFeeWei" in changes:
        client.policy_daily_fee_wei = _str(changes["dailyFeeWei"])
    if "speeds" in changes:
        client.policy_speeds = sorted(set(changes["speeds"] or ())) or None


def _int(text: str | None) -> int | None:
    return None if text is None else int(text)


def _str(value: int | str | None) -> str | None:
    return None if value is None else str(int(value))
