"""relay-api settings: env prefix ``RELAY_``, infrastructure locations unprefixed."""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator, model_validator

from relay_core.ethereum import ForwarderDomain, check_address
from relay_core.settings import MIN_SECRET_CHARS, PLACEHOLDER_SECRETS, InfraSettings, env


class ApiSettings(InfraSettings):
    host: str = Field("127.0.0.1", description="bind address of the HTTP server")
    port: int = Field(
        8000, ge=0, le=65535, validation_alias=env("PORT", "RELAY_PORT"), description="HTTP port"
    )
    log_level: str = Field("INFO", description="DEBUG | INFO | WARNING | ERROR")

    max_body_bytes: int = Field(65536, ge=1024, description="requests above this get 413")
    max_data_bytes: int = Field(24576, ge=0, description="largest calldata accepted (bytes)")
    max_gas_limit: int = Field(30_000_000, ge=21000, description="upper bound for gasLimit / gas")
    max_valid_for_s: int = Field(
        7 * 24 * 3600, ge=60, description="validUntil/deadline may be at most this far ahead"
    )

    forwarder_address: str | None = Field(
        None,
        description="ERC2771Forwarder contract (EIP-712 verifyingContract); with "
        "RELAY_CHAIN_ID it enables gasless relaying; neither set: gasless is off",
    )
    chain_id: int | None = Field(
        None, ge=1, description="EIP-712 domain chainId of the forwarder's chain"
    )
    forwarder_name: str = Field("ERC2771Forwarder", description="EIP-712 domain name")
    forwarder_version: str = Field("1", description="EIP-712 domain version")

    rate_limit_per_s: float = Field(
        50.0,
        gt=0,
        le=100,
        description="requests per second a client may make, sustained (token bucket; "
        "`relay clients policy` sets one client's own)",
    )
    rate_limit_burst: int = Field(
        100, ge=1, le=200, description="requests a client may make at once (bucket size)"
    )
    unauthenticated_rate_per_s: float = Field(
        5.0, gt=0, description="requests per second per source address without a valid key"
    )
    unauthenticated_burst: int = Field(
        20, ge=1, description="requests at once per source address without a valid key"
    )
    budget_lease_s: float = Field(
        10.0,
        gt=0,
        le=300,
        description="how long a process spends a slice of a client's daily budget from "
        "memory before giving back the rest (relay_api/limits/budget.py)",
    )
    unknown_key_cache_s: float = Field(
        30.0, ge=0, description="an unknown API key is answered 401 from memory this long"
    )
    trust_forwarded_for: bool = Field(
        False,
        description="take the client address from the last X-Forwarded-For entry (set it "
        "behind a load balancer that appends it, as the ALB does)",
    )
    auth_cache_ttl_s: float = Field(
        5.0,
        ge=0,
        description="how long a verified key is trusted (a revocation takes effect within "
        "it); keys in use are re-read in the background before it runs out",
    )
    status_cache_terminal_ttl_s: int = Field(
        600, ge=1, description="Redis TTL of a final status (confirmed, failed, ...)"
    )
    status_cache_active_ttl_s: int = Field(10, ge=1, description="Redis TTL of a non-final status")

    sqs_send_timeout_s: float = Field(2.0, gt=0, description="timeout of one SQS send call")
    outbox_sweep_interval_s: float = Field(
        5.0, gt=0, description="how often the sweeper looks for rows that never reached SQS"
    )
    outbox_sweep_grace_s: float = Field(
        10.0, ge=0, description="a row is swept only when its direct send had this long to land"
    )
    outbox_sweep_batch: int = Field(100, ge=1, le=1000, description="rows per sweeper pass")
    outbox_pack: bool = Field(
        True,
        description="send a batch's transactions ten to an SQS message (schema version 2); "
        "false while consumers older than the release that reads them still run",
    )
    sweeper_enabled: bool = Field(True, description="run the sweeper inside the API process")

    webhook_receipt_retention_s: float = Field(
        3600.0,
        gt=0,
        description="how long an executor webhook's id is kept to tell a replay from news "
        "(an older replay is applied again, harmlessly: statuses only move forward)",
    )
    webhook_signing_key: SecretStr | None = Field(
        None,
        validation_alias=env("RELAY_WEBHOOK_SIGNING_KEY"),
        description="the executor's webhook key (X-Signature HMAC); unset refuses all webhooks",
    )
    status_refresh_after_s: float = Field(
        5.0, ge=0, description="a non-final status older than this is refreshed from the executor"
    )
    status_upstream_timeout_s: float = Field(
        1.0, gt=0, description="how long a status read may wait for the executor"
    )
    callback_url_max_length: int = Field(2048, ge=16, description="longest callback URL accepted")

    dev_api_key: SecretStr | None = Field(
        None, validation_alias="RELAY_DEV_API_KEY", description="seed a client with this key (dev)"
    )

    @field_validator("forwarder_address", "chain_id", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        """``RELAY_CHAIN_ID=`` (compose's empty default) means not set."""
        return None if isinstance(value, str) and not value.strip() else value

    @model_validator(mode="after")
    def _consistent(self) -> ApiSettings:
        if (self.forwarder_address is None) != (self.chain_id is None):
            raise ValueError(
                "gasless needs both RELAY_FORWARDER_ADDRESS and RELAY_CHAIN_ID (the EIP-712 "
                "domain clients sign for); set both to enable it, neither to turn it off"
            )
        if self.forwarder_address is not None:
            self.forwarder_address = check_address(self.forwarder_address)
        if self.dev_api_key is not None and not self.is_dev:
            raise ValueError("RELAY_DEV_API_KEY is for development only (set RELAY_ENV=dev)")
        return self

    def check_production_secrets(self) -> None:
        super().check_production_secrets()
        if self.is_dev or self.webhook_signing_key is None:
            return  # without a key every executor webhook is refused (the tracker works)
        key = self.webhook_signing_key.get_secret_value()
        if (
            len(key) < MIN_SECRET_CHARS
            or key.lower() in PLACEHOLDER_SECRETS
            or "change" in key.lower()
        ):
            raise SystemExit(
                f"RELAY_WEBHOOK_SIGNING_KEY is weak or a placeholder: use at least "
                f"{MIN_SECRET_CHARS} random characters in production"
            )

    @property
    def forwarder_domain(self) -> ForwarderDomain | None:
        """The EIP-712 domain gasless requests are signed for; None when gasless is off."""
        if self.forwarder_address is None or self.chain_id is None:
            return None
        return ForwarderDomain(
            name=self.forwarder_name,
            version=self.forwarder_version,
            chain_id=self.chain_id,
            verifying_contract=self.forwarder_address,
        )
