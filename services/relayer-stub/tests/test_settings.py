"""Settings: STUB_ env prefix, loopback by default, upstream's key-length rules."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from relayer_stub.settings import DEV_API_KEY, StubSettings


def settings(**values: Any) -> StubSettings:
    return StubSettings(_env_file=None, **values)  # type: ignore[call-arg]


def test_defaults_bind_loopback_port_8080_with_one_relayer_and_upstreams_retention() -> None:
    defaults = settings()

    assert defaults.host == "127.0.0.1"
    assert defaults.port == 8080
    assert list(defaults.relayers) == ["relayer-1"]
    assert defaults.retention_s == 4 * 3600
    assert defaults.webhook_url is None
    assert (defaults.webhook_retries, defaults.webhook_backoff_min_s) == (5, 2.0)
    assert defaults.webhook_backoff_max_s == 8.0


def test_environment_variables_use_the_stub_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STUB_PORT", "9999")
    monkeypatch.setenv("STUB_RELAYER_IDS", "alpha, beta")
    monkeypatch.setenv("STUB_LIFECYCLE__PAUSED", "true")
    monkeypatch.setenv("STUB_LIFECYCLE__DELAY_SENT_MS", "0")

    loaded = settings()

    assert loaded.port == 9999
    assert list(loaded.relayers) == ["alpha", "beta"]
    assert loaded.relayers["alpha"] == loaded.relayer_address
    assert loaded.relayers["beta"] != loaded.relayer_address
    assert loaded.lifecycle.paused is True
    assert loaded.lifecycle.delay_sent_ms == 0
    assert loaded.lifecycle.delay_confirmed_ms == 500


@pytest.mark.parametrize(
    "values",
    [
        {"api_key": "short-key"},
        {"api_key": "a key with spaces in it that is long enough"},
        {"host": "192.0.2.10"},  # the well-known dev key must not leave loopback
        # /__admin (reset, faults) must not leave loopback unguarded (issue 27)
        {"host": "192.0.2.10", "api_key": "k" * 40},
        {"host": "0.0.0.0", "api_key": "k" * 40},  # noqa: S104
        {"admin_token": "short"},
        {"webhook_signing_key": "too-short"},
        {"webhook_url": "ftp://example.invalid"},
        {"relayer_ids": "a,a"},
        {"relayer_address": "0x123"},
    ],
)
def test_unsafe_or_invalid_settings_are_refused(values: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        settings(**values)


def test_a_real_key_may_bind_beyond_loopback() -> None:
    opened = settings(host="192.0.2.10", api_key="k" * 40, admin_token="t" * 24)

    assert opened.api_key.get_secret_value() != DEV_API_KEY


# -- chain mode: one account per relayer --------------------------------------------------------

LOOPBACK_NODE = "http://127.0.0.1:8545"
REMOTE_NODE = "https://rpc.example.invalid"
KEYS = ["0x" + f"{n:02x}" * 32 for n in (0x11, 0x22, 0x33)]


def test_chain_mode_on_a_loopback_node_gives_each_relayer_a_dev_account() -> None:
    from relay_devstack import localchain

    loaded = settings(chain_rpc_url=LOOPBACK_NODE, relayer_ids="a,b,c")

    expected = [localchain.dev_account(localchain.relayer_account(p)).address for p in range(3)]
    assert list(loaded.relayers.values()) == expected
    assert [localchain.relayer_account(p) for p in range(3)] == [localchain.RELAYER_ACCOUNT, 10, 11]
    assert list(loaded.chain_signers()) == ["a", "b", "c"]
    assert loaded.relayers["a"] == localchain.dev_account(0).address


def test_relayer_private_keys_give_each_relayer_its_own_account_in_order() -> None:
    from eth_account import Account

    loaded = settings(
        chain_rpc_url=REMOTE_NODE, relayer_ids="a,b,c", relayer_private_keys=" , ".join(KEYS)
    )

    assert loaded.relayers == {
        rid: Account.from_key(key).address for rid, key in zip("abc", KEYS, strict=True)
    }
    for key in KEYS:  # a secret: never in the settings' repr
        assert key not in repr(loaded)
        assert key.removeprefix("0x")[:16] not in str(loaded)


def test_the_single_key_still_signs_for_the_first_relayer() -> None:
    from eth_account import Account

    from relay_devstack import localchain

    loaded = settings(chain_rpc_url=LOOPBACK_NODE, relayer_ids="a,b", relayer_private_key=KEYS[0])

    assert loaded.relayers == {
        "a": Account.from_key(KEYS[0]).address,
        "b": localchain.dev_account(localchain.relayer_account(1)).address,
    }
    alone = settings(chain_rpc_url=REMOTE_NODE, relayer_private_key=KEYS[1])
    assert alone.relayers == {"relayer-1": Account.from_key(KEYS[1]).address}


@pytest.mark.parametrize(
    ("values", "why"),
    [
        ({"relayer_ids": "a,b"}, "needs a key for each of the 2 relayers"),
        ({"relayer_ids": "a,b", "relayer_private_key": KEYS[0]}, "needs a key for each"),
        ({"relayer_ids": "a,b", "relayer_private_keys": KEYS[0]}, "1 keys for 2"),
        ({"relayer_ids": "a,b", "relayer_private_keys": f"{KEYS[0]},0x1234"}, "32 bytes of hex"),
        (
            {"relayer_private_key": KEYS[0], "relayer_private_keys": KEYS[1]},
            "not both",
        ),
        ({"relayer_ids": "a,b", "relayer_private_keys": f"{KEYS[0]},{KEYS[0][2:]}"}, "same"),
    ],
)
def test_chain_mode_without_a_key_for_every_relayer_is_refused(
    values: dict[str, Any], why: str
) -> None:
    with pytest.raises(ValidationError, match=why):
        settings(chain_rpc_url=REMOTE_NODE, **values)


def test_the_dev_chain_has_accounts_for_ten_relayers() -> None:
    from relay_devstack import localchain

    ids = ",".join(f"r{n}" for n in range(localchain.MAX_DEV_RELAYERS + 1))

    assert len(settings(chain_rpc_url=LOOPBACK_NODE, relayer_ids=ids[:-4]).relayer_ids) == 10
    with pytest.raises(ValidationError, match="accounts for 10 relayers"):
        settings(chain_rpc_url=LOOPBACK_NODE, relayer_ids=ids)
    with pytest.raises(ValueError, match="10 relayers"):
        localchain.relayer_account(localchain.MAX_DEV_RELAYERS)
    accounts = [localchain.relayer_account(p) for p in range(localchain.MAX_DEV_RELAYERS)]
    assert max(accounts) < localchain.DEV_ACCOUNTS  # all funded by localchain.start
    assert len(set(accounts)) == len(accounts)
    assert not set(accounts) & {localchain.DEPLOYER_ACCOUNT, localchain.SENDER_ACCOUNT}


def test_a_key_that_is_another_relayers_dev_account_is_refused_at_start() -> None:
    from relay_devstack import localchain

    second = localchain.dev_account(localchain.relayer_account(1)).key.hex()
    loaded = settings(chain_rpc_url=LOOPBACK_NODE, relayer_ids="a,b", relayer_private_key=second)

    with pytest.raises(ValueError, match="same account"):
        loaded.chain_signers()
