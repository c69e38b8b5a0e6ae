"""relay_core.policy.Spend.of: what a stored request asks of the wallet, whether its type
comes as the enum or as the column's text."""

from __future__ import annotations

import pytest

from relay_core.policy import Spend
from relay_core.statuses import TxType

_TO = "0x000000000000000000000000000000000000dEaD"


@pytest.mark.parametrize("kind", [TxType.direct, "direct"])
def test_a_direct_request_asks_its_value_gas_and_fee(kind: TxType | str) -> None:
    spend = Spend.of(kind, {"to": _TO, "value": "5", "gasLimit": "21000"}, fee_per_gas=3)
    assert spend == Spend(TxType.direct, _TO, 5, 21000, "fast", 63000)
    assert Spend.of(kind, {"to": _TO}).value == 0


@pytest.mark.parametrize("kind", [TxType.gasless, "gasless"])
def test_a_gasless_request_asks_its_forwarded_call_and_the_forwarders_gas(
    kind: TxType | str,
) -> None:
    request = {"request": {"to": _TO, "value": "7", "gas": "50000"}}
    spend = Spend.of(kind, request, fee_per_gas=2, forwarder_overhead=1000)
    assert spend == Spend(TxType.gasless, _TO, 7, 50000, "fast", 102000)


def test_an_unknown_type_is_refused() -> None:
    with pytest.raises(ValueError, match="swap"):
        Spend.of("swap", {"to": _TO})
