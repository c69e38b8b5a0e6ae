from __future__ import annotations

import pytest
from eth_abi import decode as abi_decode
from eth_account import Account

from relay_core import ethereum

DEAD = "0x000000000000000000000000000000000000dEaD"
DOMAIN = ethereum.ForwarderDomain(
    "ERC2771Forwarder", "1", 31337, "0x5FbDB2315678afecb367f032d93F642f64180aa3"
)


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        (DEAD, True),
        (DEAD.lower(), True),
        ("0x" + DEAD[2:].upper(), True),
        ("0x000000000000000000000000000000000000DeaD", False),
        ("0x1234", False),
        ("dead" * 10, False),
    ],
)
def test_address_accepts_checksummed_or_single_case_only(value: str, ok: bool) -> None:
    if ok:
        assert ethereum.check_address(value) == ethereum.check_address(DEAD)
    else:
        with pytest.raises(ValueError, match=r"hex digits|checksum"):
            ethereum.check_address(value)


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("0", True),
        ("1", True),
        (str(2**256 - 1), True),
        (str(2**256), False),
        ("01", False),
        ("-1", False),
        ("1.0", False),
        ("1e3", False),
        ("", False),
        (" 1", False),
    ],
)
def test_uint_parsing_is_exact_decimal_within_uint256(value: str, ok: bool) -> None:
    if ok:
        assert ethereum.parse_uint(value) == int(value)
    else:
        with pytest.raises(ValueError, match=r"decimal integer|at most"):
            ethereum.parse_uint(value)


def _request(sender: str) -> ethereum.ForwardRequest:
    return ethereum.ForwardRequest(sender, DEAD, 10, 100_000, 3, 2**40, "0xa9059cbb")


def test_forward_request_signature_recovers_the_signer_only_under_the_same_domain() -> None:
    account = Account.create()
    request = _request(account.address)
    signature = ethereum.sign_forward_request(DOMAIN, request, account.key)
    assert ethereum.recover_forward_request_signer(DOMAIN, request, signature) == account.address
    other_domain = ethereum.ForwarderDomain("ERC2771Forwarder", "1", 1, DOMAIN.verifying_contract)
    assert (
        ethereum.recover_forward_request_signer(other_domain, request, signature) != account.address
    )


def test_execute_calldata_has_the_v5_selector_and_forward_request_data_layout() -> None:
    account = Account.create()
    request = _request(account.address)
    signature = ethereum.sign_forward_request(DOMAIN, request, account.key)
    calldata = ethereum.forwarder_execute_calldata(request, signature)
    # keccak("execute((address,address,uint256,uint256,uint48,bytes,bytes))")[:4]
    assert calldata[:10] == "0xdf905caf"
    (decoded,) = abi_decode(
        ["(address,address,uint256,uint256,uint48,bytes,bytes)"], bytes.fromhex(calldata[10:])
    )
    sender, to, value, gas, deadline, data, sig = decoded
    assert (sender.lower(), to.lower()) == (account.address.lower(), DEAD.lower())
    assert (value, gas, deadline) == (10, 100_000, 2**40)
    assert "0x" + data.hex() == "0xa9059cbb"
    assert "0x" + sig.hex() == signature
