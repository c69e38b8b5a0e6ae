from __future__ import annotations

import pytest

from relay_core.settings import InfraSettings, async_database_url


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
