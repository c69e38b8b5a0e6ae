from __future__ import annotations

import pytest

from relay_core.settings import DEV_EXECUTOR_KEY, InfraSettings, async_database_url


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("mysql://u:p@h:3306/db", "mysql+asyncmy://u:p@h:3306/db"),
        ("mariadb://u@h/db", "mysql+asyncmy://u@h/db"),
        ("sqlite:///relay.db", "sqlite+aiosqlite:///relay.db"),
        ("mysql+aiomysql://u@h/db", "mysql+aiomysql://u@h/db"),
    ],
)
def test_plain_database_urls_map_to_async_drivers(url: str, expected: str) -> None:
    assert async_database_url(url) == expected


def test_unknown_database_scheme_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="unsupported database scheme"):
        InfraSettings(database_url="postgres://h/db")


def test_conventional_env_names_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "mysql://x@y/z")
    monkeypatch.setenv("REDIS_URL", "redis://r:6379/0")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:4566")
    settings = InfraSettings()
    assert (settings.database_url, settings.redis_url, settings.aws_endpoint_url) == (
        "mysql://x@y/z",
        "redis://r:6379/0",
        "http://127.0.0.1:4566",
    )


@pytest.mark.parametrize(
    "key",
    [
        DEV_EXECUTOR_KEY,
        "changeme",
        "short-but-not-a-placeholder",
        "example-key-example-key-example-key-example",
    ],
)
def test_production_refuses_an_executor_key_that_is_not_a_real_one(key: str) -> None:
    settings = InfraSettings(environment="production", executor_api_key=key)
    with pytest.raises(SystemExit, match="RELAY_EXECUTOR_API_KEY"):
        settings.check_production_secrets()
    real = InfraSettings(environment="production", executor_api_key="k" * 20 + "x7Qp2Lw9Zr4Nt8Bv")
    real.check_production_secrets()


def test_the_test_environment_relaxes_its_checks_only_away_from_a_deployment() -> None:
    local = {
        "environment": "test",
        "aws_endpoint_url": "http://127.0.0.1:4566",
        "executor_url": "http://127.0.0.1:8080",
        "database_url": "mysql://root@db.internal:3306/relay_tests",  # a remote test database
    }
    InfraSettings(**local).check_production_secrets()  # the stub's key, in a test: fine
    for deployed in (
        {"aws_endpoint_url": None},  # AWS's own SQS
        {"executor_url": "https://relayer.internal:8080"},
        {"chain_rpc_url": "https://mainnet.example/rpc"},
    ):
        with pytest.raises(SystemExit, match="RELAY_ENV=test is for tests"):
            InfraSettings(**{**local, **deployed}).check_production_secrets()
