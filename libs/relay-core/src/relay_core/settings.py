"""Settings shared by every Relay service.

Each service declares one pydantic-settings class that inherits from :class:`InfraSettings`
and adds its own fields under its own env prefix. Infrastructure locations keep their
conventional unprefixed names (``DATABASE_URL``, ``REDIS_URL``, ``AWS_ENDPOINT_URL``...) so a
deployment sets them once for every service.
"""

from __future__ import annotations

import ipaddress
from enum import StrEnum
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from relay_core.netguard import AddressPolicy
from relay_core.relayers import RelayerSpec, parse_specs

MIN_SECRET_CHARS = 32  # what OZ Relayer demands of its own keys


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# The relayer-stub's development key, so `make run` works without configuration.
DEV_EXECUTOR_KEY = "relayer-stub-dev-api-key-0123456789abcdef"
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
        "sqlite:///.relay/relay.db",
        validation_alias=env("DATABASE_URL", "RELAY_DATABASE_URL"),
        description="SQLAlchemy URL: mysql://user:pass@host:3306/relay or sqlite:///path.db "
        "(the default is the file `make run` keeps, so `relay` commands beside it find it)",
    )
    database_pool_size: int = Field(
        10, ge=1, le=200, description="connections per process, the most it opens (no overflow)"
    )
    sqs_wire: bool = Field(
        True,
        description="send the hot SQS calls (send and delete batches, receive) through "
        "relay_wire.sqswire instead of botocore: the same requests at a fraction of the CPU",
    )
    database_direct_pool_size: int = Field(
        4,
        ge=0,
        le=100,
        description="MySQL only: connections per process for the hot paths' fixed statements "
        "(the accept INSERT, the consumer's group commit), beside the pool; 0 sends them "
        "through SQLAlchemy too",
    )
    database_connect_timeout_s: float = Field(
        3.0, gt=0, description="connect timeout; an unreachable database answers 503 after it"
    )
    database_pool_timeout_s: float = Field(
        10.0, gt=0, description="how long work waits for a free pooled connection"
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
    fast_lane: bool = Field(
        True,
        description="requests that ask for speed fast or fastest go to the fast lane: its own "
        "queue and DLQ, received before the normal lane (which keeps a share)",
    )
    fast_queue_name: str | None = Field(
        None, description="the fast lane's queue (default: RELAY_QUEUE_NAME + '-fast')"
    )
    fast_dlq_name: str | None = Field(
        None, description="the fast lane's DLQ (default: RELAY_QUEUE_NAME + '-fast-dlq')"
    )
    queue_max_receive_count: int = Field(
        40,
        ge=1,
        le=1000,
        description="receives before SQS moves a message to the DLQ; 40 receives under the "
        "consumer's back-off outlast its one-hour retry budget (docs/runbook.md)",
    )
    queue_visibility_timeout_s: int = Field(
        30,
        ge=0,
        le=43200,
        description="queue visibility timeout (set by `relay queues create`): how long the "
        "messages a consumer held stay hidden after it died; longer work extends it by "
        "heartbeats",
    )
    queue_retention_s: int = Field(
        4 * 24 * 3600, ge=60, le=1209600, description="message retention of the work queue"
    )

    reconcile_pending_after_s: float = Field(
        7200.0,
        gt=0,
        description="a pending row enqueued this long ago and never claimed has lost its "
        "message (or it was dead-lettered): the reconciler enqueues it again. Keep it above "
        "the retry budget: a live message is received again well within it",
    )
    reconcile_missing_after_s: float = Field(
        1800.0,
        gt=0,
        description="a submitted row whose executor record has answered 404 this long is "
        "given a final status (failed, with the reason) by the reconciler",
    )
    reconcile_batch: int = Field(500, ge=1, le=10_000, description="rows per reconciler pass")

    callback_allowed_networks: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="comma-separated CIDRs client callbacks may reach although they are "
        "private (an internal receiver on purpose); everything else inside is refused",
    )
    callback_allow_loopback: bool = Field(
        False, description="let client callbacks reach 127.0.0.1/::1 (local development)"
    )

    chain_rpc_url: str | None = Field(
        None,
        validation_alias=env("RELAY_CHAIN_RPC_URL", "CHAIN_RPC_URL"),
        description="JSON-RPC URL of the chain the executor sends to (gasless nonces, receipts); "
        "unset: Relay never reads the chain itself",
    )

    forwarder_gas_overhead: int = Field(
        60_000, ge=0, description="gas added to a gasless request's gas for the forwarder"
    )
    max_fee_per_gas_wei: int = Field(
        100_000_000_000,
        ge=0,
        description="without RELAY_CHAIN_RPC_URL: the most a unit of gas is taken to cost at "
        "speed safeLow (average 1.25x, fast 1.5x, fastest 2x), for the clients' fee budgets "
        "(with it: twice the chain's base fee, plus a tip)",
    )

    executor_url: str = Field(
        "http://127.0.0.1:8080",
        validation_alias=env("RELAY_EXECUTOR_URL", "EXECUTOR_URL"),
        description="OpenZeppelin Relayer (or relayer-stub) base URL",
    )
    executor_api_key: SecretStr = Field(
        SecretStr(DEV_EXECUTOR_KEY),
        validation_alias=env("RELAY_EXECUTOR_API_KEY", "EXECUTOR_API_KEY"),
        description="Bearer key of the executor; must be set in production",
    )
    executor_relayer_id: str = Field("relayer-1", description="the executor's relayer id")
    executor_timeout_s: float = Field(10.0, gt=0, description="timeout of one executor call")
    executor_relayers: str = Field(
        "",
        description="the relayer pool (relay_core.relayers): a JSON list of {id, url, apiKey, "
        "minBalanceWei} (all but id optional, defaulting to the settings above), or relayer "
        "ids separated by commas; empty: RELAY_EXECUTOR_RELAYER_ID alone",
    )
    relayer_min_balance_wei: int = Field(
        10**16,
        ge=0,
        description="a relayer whose balance is below this many wei is `low` and takes no new "
        "work (per relayer: minBalanceWei in RELAY_EXECUTOR_RELAYERS); 0 turns the watch off",
    )
    relayer_jam_after_s: float = Field(
        45.0,
        gt=0,
        description="a relayer whose oldest submitted transaction has not been mined for this "
        "long is `jammed` and takes no new work until it mines again (raise it on a chain "
        "whose blocks or fee markets are slow)",
    )
    relayer_jam_after_blocks: int = Field(
        0,
        ge=0,
        description="with RELAY_CHAIN_RPC_URL: a relayer is also `jammed` once its oldest "
        "submitted transaction has stayed unmined while this many blocks were made (whichever "
        "of this and RELAY_RELAYER_JAM_AFTER_S comes first); 0: the seconds alone",
    )
    relayer_watch_interval_s: float = Field(
        5.0, gt=0, description="how often the pool's states are read (jams, pauses, in flight)"
    )
    relayer_balance_interval_s: float = Field(
        30.0, gt=0, description="how often each relayer's balance is read from the executor"
    )

    def relayer_specs(self) -> list[RelayerSpec]:
        """The relayer pool (relay_core.relayers)."""
        return parse_specs(
            self.executor_relayers,
            url=self.executor_url,
            api_key=self.executor_api_key.get_secret_value(),
            default_id=self.executor_relayer_id,
            min_balance_wei=self.relayer_min_balance_wei,
        )

    @field_validator("executor_relayers")
    @classmethod
    def _pool(cls, value: str) -> str:
        parse_specs(value, url="", api_key="", default_id="relayer-1", min_balance_wei=0)
        return value

    def lanes(self) -> tuple[str, ...]:
        """The lanes of work this deployment has."""
        return ("normal", "fast") if self.fast_lane else ("normal",)

    def lane_queues(self, lane: str) -> tuple[str, str]:
        """A lane's (queue name, DLQ name)."""
        if lane == "fast":
            return (
                self.fast_queue_name or f"{self.queue_name}-fast",
                self.fast_dlq_name or f"{self.queue_name}-fast-dlq",
            )
        return self.queue_name, self.dlq_name

    def check_production_secrets(self) -> None:
        """Called by the long-running services at start (not by one-off CLI commands).

        In production the executor's key must be a real one: not the relayer-stub's, not a
        placeholder, and at least as long as OZ Relayer demands of its own (32 characters).
        ``RELAY_ENV=test`` relaxes this, as ``dev`` does, but only for tests: settings that
        reach AWS's SQS, or an executor or a chain off this machine, are a deployment's, and
        refuse to start with ``test`` (a test database may be remote)."""
        if self.environment is Environment.test:
            remote = self.remote_endpoints()
            if remote:
                raise SystemExit(
                    "RELAY_ENV=test is for tests on this machine, and these settings reach "
                    f"beyond it ({', '.join(remote)}): use RELAY_ENV=production (or dev)"
                )
        if self.is_dev:
            return
        for spec in self.relayer_specs():
            key = spec.api_key
            if (
                key in (DEV_EXECUTOR_KEY, *PLACEHOLDER_SECRETS)
                or len(key) < MIN_SECRET_CHARS
                or any(word in key.lower() for word in ("change", "example", "placeholder"))
            ):
                raise SystemExit(
                    "RELAY_EXECUTOR_API_KEY (or a relayer's apiKey in "
                    "RELAY_EXECUTOR_RELAYERS) must be the executor's real key in production "
                    f"(at least {MIN_SECRET_CHARS} characters, as OZ Relayer requires; "
                    f"relayer {spec.id})"
                )

    def remote_endpoints(self) -> list[str]:
        """The settings that reach what only a deployment reaches: AWS's SQS, or an executor
        or a chain off this machine (their names)."""
        urls = {
            "AWS_ENDPOINT_URL": self.aws_endpoint_url or "https://sqs.amazonaws.com",
            "RELAY_EXECUTOR_URL": self.executor_url,
            "RELAY_CHAIN_RPC_URL": self.chain_rpc_url,
        }
        for spec in self.relayer_specs():
            if spec.url != self.executor_url:
                urls[f"RELAY_EXECUTOR_RELAYERS ({spec.id})"] = spec.url
        remote = []
        for name, url in urls.items():
            if url is None:
                continue
            host = urlsplit(url).hostname or ""
            if host != "localhost" and not _loopback(host):
                remote.append(name)
        return remote

    @field_validator("callback_allowed_networks", mode="before")
    @classmethod
    def _split_networks(cls, value: object) -> object:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        for network in value if isinstance(value, list) else []:
            try:
                ipaddress.ip_network(str(network), strict=False)
            except ValueError as exc:
                raise ValueError(f"RELAY_CALLBACK_ALLOWED_NETWORKS: {exc}") from exc
        return value

    def callback_policy(self) -> AddressPolicy:
        """Where client callbacks may go (https only in production)."""
        return AddressPolicy.build(
            self.callback_allowed_networks,
            allow_loopback=self.callback_allow_loopback,
            require_https=not self.is_dev,
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


__all__ = [
    "Environment",
    "InfraSettings",
    "async_database_url",
    "env",
]
