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
