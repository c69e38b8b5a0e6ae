"""Settings shared by every Relay service.

Each service declares one pydantic-settings class that inherits from :class:`InfraSettings`
and adds its own fields under its own env prefix. Infrastructure locations keep their
conventional unprefixed names (``DATABASE_URL``, ``REDIS_URL``, ``AWS_ENDPOINT_URL``...) so a
deployment sets them once for every service.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

PLACEHOLDER_SECRETS = frozenset(
    {"", "changeme", "change-me", "secret", "dev", "test", "placeholder"}
)


class Environment(StrEnum):
    dev = "dev"
    test = "test"
    production = "production"


def env(*names: str) -> AliasChoices:
    """Accept the unprefixed conventional name as well as the prefixed one."""
    return AliasChoices(*names)


def async_database_url(url: str) -> str:
    """Map a plain SQLAlchemy URL to the async driver Relay uses for it.

    ``mysql://`` and ``mariadb://`` become ``mysql+asyncmy://``; ``sqlite://`` becomes
    ``sqlite+aiosqlite://``. URLs that already name a driver are kept as they are.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError("DATABASE_URL must look like mysql://user:pass@host/db or sqlite:///path")
    if "+" in scheme:
        return url
    if scheme in {"mysql", "mariadb"}:
        return f"mysql+asyncmy://{rest}"
    if scheme == "sqlite":
        return f"sqlite+aiosqlite://{rest}"
    raise ValueError(f"unsupported database scheme {scheme!r}: use mysql:// or sqlite://")


class InfraSettings(BaseSettings):
    """Where the shared infrastructure is, and the queue contract every service agrees on."""

    model_config = SettingsConfigDict(env_prefix="RELAY_", extra="ignore", populate_by_name=True)

    environment: Environment = Field(
        Environment.production,
        validation_alias=env("RELAY_ENV", "RELAY_ENVIRONMENT"),
        description="dev | test | production; dev-only conveniences are refused in production",
    )
    database_url: str = Field(
        "sqlite:///./relay.db",
        validation_alias=env("DATABASE_URL", "RELAY_DATABASE_URL"),
        description="SQLAlchemy URL: mysql://user:pass@host:3306/relay or sqlite:///path.db",
    )
    database_pool_size: int = Field(10, ge=1, le=200, description="connections kept per process")
    database_connect_timeout_s: float = Field(
        3.0, gt=0, description="connect / pool checkout timeout; past it requests get 503"
    )
    redis_url: str | None = Field(
        None,
        validation_alias=env("REDIS_URL", "RELAY_REDIS_URL"),
        description="redis://host:6379/0; unset disables the cache tier",
    )
    redis_prefix: str = Field("relay:", description="prefix for every Redis key Relay writes")
    redis_timeout_s: float = Field(
        0.25, gt=0, description="per-command timeout; on failure Redis is skipped for 1 s"
    )

    aws_region: str = Field(
        "us-east-1",
        validation_alias=env("AWS_REGION", "AWS_DEFAULT_REGION"),
        description="SQS region",
    )
    aws_endpoint_url: str | None = Field(
        None,
        validation_alias=env("AWS_ENDPOINT_URL", "RELAY_AWS_ENDPOINT_URL"),
        description="SQS endpoint override (LocalStack, ministack, moto); unset uses AWS",
    )
    queue_name: str = Field("relay-transactions", description="work queue name")
    dlq_name: str = Field("relay-transactions-dlq", description="dead-letter queue name")
    queue_max_receive_count: int = Field(
        3, ge=1, le=1000, description="receives before SQS moves a message to the DLQ"
    )
    queue_visibility_timeout_s: int = Field(
        60, ge=0, le=43200, description="queue visibility timeout (set by `relay queues create`)"
    )
    queue_retention_s: int = Field(
        4 * 24 * 3600, ge=60, le=1209600, description="message retention of the work queue"
    )

    @field_validator("database_url")
    @classmethod
    def _known_database(cls, value: str) -> str:
        async_database_url(value)
        return value

    @property
    def async_database_url(self) -> str:
        return async_database_url(self.database_url)

    @property
    def is_dev(self) -> bool:
        return self.environment is not Environment.production


def reject_placeholder_secrets(settings: BaseSettings, *names: str) -> None:
    """Refuse to start in production with a secret left at a well-known placeholder."""
    for name in names:
        value: Any = getattr(settings, name)
        raw = value.get_secret_value() if isinstance(value, SecretStr) else value
        if raw is None or str(raw).strip().lower() in PLACEHOLDER_SECRETS:
            raise ValueError(f"{name} must be set to a real secret in production")


__all__ = [
    "Environment",
    "InfraSettings",
    "async_database_url",
    "env",
    "reject_placeholder_secrets",
]
