"""relayer-stub settings: env prefix ``STUB_``; nested models take JSON or ``__`` paths
(``STUB_FAULTS='{"error_rate":0.2}'`` or ``STUB_FAULTS__ERROR_RATE=0.2``)."""

from __future__ import annotations

import hashlib
import ipaddress
import re
from typing import TYPE_CHECKING, Annotated
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from relayer_stub.faults.schemas import FaultConfig
from relayer_stub.lifecycle.schemas import LifecycleConfig
from relayer_stub.webhooks.schemas import WebhookConfig, check_signing_key, check_url

if TYPE_CHECKING:
    from eth_account.signers.local import LocalAccount

MIN_API_KEY_CHARS = 32  # upstream panics at start-up below this
# A well-known key so `uv run relayer-stub` works out of the box; refused on a non-loopback bind.
DEV_API_KEY = "relayer-stub-dev-api-key-0123456789abcdef"
DEFAULT_RELAYER_ADDRESS = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
# relay_devstack.localchain.MAX_DEV_RELAYERS, without importing it (and eth_account) to validate.
MAX_DEV_RELAYERS = 10


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_ADDRESS = re.compile(r"^0x[0-9a-fA-F]{40}$")
_PRIVATE_KEY = re.compile(r"^(?:0x)?[0-9a-fA-F]{64}$")


def derived_address(relayer_id: str) -> str:
    """A stable (lower-case) address for a relayer other than the first one."""
    return "0x" + hashlib.sha256(relayer_id.encode()).hexdigest()[:40]


class StubSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="STUB_", env_nested_delimiter="__", extra="ignore")

    host: str = Field("127.0.0.1", description="bind address; loopback unless set")
    port: int = Field(8080, ge=0, le=65535, description="HTTP port")
    log_level: str = Field("INFO", description="DEBUG | INFO | WARNING | ERROR")
    graceful_shutdown_s: int = Field(5, ge=0, description="in-flight requests get this long (s)")

    api_key: SecretStr = Field(SecretStr(DEV_API_KEY), description="Bearer key, >= 32 chars")
    admin_token: SecretStr | None = Field(
        None,
        description="when set (>= 16 chars), /__admin needs Authorization: Bearer "
        "<admin_token>; required on a non-loopback host (make run sets one)",
    )

    relayer_ids: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["relayer-1"], description="comma-separated relayer ids"
    )
    relayer_address: str = Field(
        DEFAULT_RELAYER_ADDRESS, description="`from` of the first relayer; others are derived"
    )
    base_gas_price_wei: int = Field(1_000_000_000, ge=0, description="gas price of `safeLow`")

    ledger_path: str = Field(
        ".relay/relayer-stub.sqlite3", description="SQLite file (WAL); ':memory:' for none"
    )
    retention_s: float = Field(
        4 * 3600.0, ge=0, description="final transactions are deleted this long after"
    )
    persist_interval_s: float = Field(
        0.5, gt=0, description="status changes are written to the ledger this often (batched)"
    )
    maintenance_interval_s: float = Field(
        0.25, gt=0, description="how often retention and expiry of held transactions run"
    )

    lifecycle: LifecycleConfig = Field(
        default_factory=LifecycleConfig,
        description="JSON, same as PUT /__admin/lifecycle (services/relayer-stub/README.md)",
    )
    faults: FaultConfig = Field(
        default_factory=FaultConfig,
        description="JSON, same as PUT /__admin/faults (services/relayer-stub/README.md)",
    )

    chain_rpc_url: str | None = Field(
        None,
        description="chain mode: sign, broadcast and follow transactions on this JSON-RPC node "
        "(unset: the in-memory lifecycle)",
    )
    relayer_private_key: SecretStr | None = Field(
        None,
        description="chain mode: the first relayer's key (its address replaces "
        "STUB_RELAYER_ADDRESS); on a loopback node it defaults to the dev chain's account 0",
    )
    relayer_private_keys: SecretStr | None = Field(
        None,
        description="chain mode: comma-separated, one key per STUB_RELAYER_IDS in order (instead "
        "of STUB_RELAYER_PRIVATE_KEY); on a loopback node each defaults to a dev account "
        "(relay_devstack.localchain.relayer_account)",
    )
    chain_confirmations: int = Field(
        1, ge=1, le=100, description="chain mode: blocks (the receipt's included) to `confirmed`"
    )
    chain_poll_interval_s: float = Field(
        0.1, gt=0, description="chain mode: how often the chain head is read"
    )
    chain_rpc_latency_ms: float = Field(
        0.0,
        ge=0,
        le=10_000,
        description="chain mode: added to every call to the node, as a remote node's round trip "
        "(a hosted provider's is tens of milliseconds; a loopback anvil's is nearly 0, which "
        "leaves a relayer's serial sender no wait to overlap)",
    )
    chain_priority_fee_wei: int = Field(
        1_000_000_000,
        ge=0,
        description="chain mode: the tip added to the latest base fee before the speed's factor",
    )

    webhook_url: str | None = Field(None, description="where status webhooks go; unset = off")
    webhook_signing_key: SecretStr | None = Field(
        None, description="HMAC-SHA256 key for X-Signature (>= 32 chars)"
    )
    webhook_retries: int = Field(5, ge=0, description="retries after the first attempt")
    webhook_backoff_min_s: float = Field(2.0, ge=0, description="shortest retry delay")
    webhook_backoff_max_s: float = Field(8.0, ge=0, description="longest retry delay")
    webhook_timeout_s: float = Field(10.0, gt=0, description="timeout of one delivery")
    webhook_concurrency: int = Field(16, ge=1, le=1024, description="deliveries in flight")
    webhook_queue_max: int = Field(100_000, ge=1, description="undelivered webhooks kept")

    @field_validator("relayer_ids", mode="before")
    @classmethod
    def _split_ids(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("webhook_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return check_url(value)

    @field_validator("webhook_signing_key")
    @classmethod
    def _key(cls, value: SecretStr | None) -> SecretStr | None:
        return check_signing_key(value)

    @model_validator(mode="after")
    def _consistent(self) -> StubSettings:
        key = self.api_key.get_secret_value()
        if len(key) < MIN_API_KEY_CHARS or " " in key:
            raise ValueError(f"STUB_API_KEY must be at least {MIN_API_KEY_CHARS} chars, no spaces")
        if key == DEV_API_KEY and not _is_loopback(self.host):
            raise ValueError("set STUB_API_KEY before binding relayer-stub to a non-loopback host")
        if self.admin_token is None and not _is_loopback(self.host):
            # /__admin resets the ledger and injects faults: open only on loopback.
            raise ValueError(
                "set STUB_ADMIN_TOKEN before binding relayer-stub to a non-loopback host"
            )
        if self.admin_token is not None and len(self.admin_token.get_secret_value()) < 16:
            raise ValueError("STUB_ADMIN_TOKEN must be at least 16 chars")
        if not self.relayer_ids:
            raise ValueError("STUB_RELAYER_IDS must name at least one relayer")
        if len(set(self.relayer_ids)) != len(self.relayer_ids):
            raise ValueError("STUB_RELAYER_IDS has duplicates")
        # Format only: an EIP-55 check would need keccak (eth_account), a second of start-up.
        if not _ADDRESS.fullmatch(self.relayer_address):
            raise ValueError("STUB_RELAYER_ADDRESS must be 0x followed by 40 hex digits")
        if self.webhook_backoff_max_s < self.webhook_backoff_min_s:
            raise ValueError("STUB_WEBHOOK_BACKOFF_MAX_S must be >= STUB_WEBHOOK_BACKOFF_MIN_S")
        self._check_fault_relayers()
        if self.chain_rpc_url is not None:
            self._check_chain_keys()
        return self

    def _check_fault_relayers(self) -> None:
        unknown = self.faults.unknown_relayers(self.relayer_ids)
        if unknown:
            raise ValueError(f"STUB_FAULTS names relayers not in STUB_RELAYER_IDS: {unknown}")

    def _check_chain_keys(self) -> None:
        keys = self._private_keys()
        count = len(self.relayer_ids)
        if self.relayer_private_keys is not None and self.relayer_private_key is not None:
            raise ValueError("set STUB_RELAYER_PRIVATE_KEYS or STUB_RELAYER_PRIVATE_KEY, not both")
        if self.relayer_private_keys is not None and len(keys) != count:
            raise ValueError(
                f"STUB_RELAYER_PRIVATE_KEYS has {len(keys)} keys for {count} STUB_RELAYER_IDS: "
                "give one key per relayer, in order"
            )
        if not all(_PRIVATE_KEY.fullmatch(key) for key in keys):
            raise ValueError("a relayer private key must be 32 bytes of hex (0x optional)")
        if len({key.lower().removeprefix("0x") for key in keys}) != len(keys):
            raise ValueError("two relayers have the same private key: each needs its own account")
        host = urlsplit(self.chain_rpc_url or "").hostname or ""
        if len(keys) < count and not _is_loopback(host):
            raise ValueError(
                f"chain mode on a non-loopback node needs a key for each of the {count} "
                "relayers: STUB_RELAYER_PRIVATE_KEYS (comma-separated, in STUB_RELAYER_IDS "
                "order; or STUB_RELAYER_PRIVATE_KEY for a single relayer). The development "
                "keys are public."
            )
        if len(keys) < count and count > MAX_DEV_RELAYERS:
            raise ValueError(
                f"the dev chain has accounts for {MAX_DEV_RELAYERS} relayers, not {count}: "
                "set STUB_RELAYER_PRIVATE_KEYS"
            )

    def _private_keys(self) -> list[str]:
        """The configured keys, by relayer position (possibly fewer than the relayers)."""
        if self.relayer_private_keys is not None:
            raw = self.relayer_private_keys.get_secret_value()
            return [key.strip() for key in raw.split(",") if key.strip()]
        if self.relayer_private_key is not None:
            return [self.relayer_private_key.get_secret_value().strip()]
        return []

    def chain_signers(self) -> dict[str, LocalAccount]:
        """Chain mode: each relayer's account, by id: its key from STUB_RELAYER_PRIVATE_KEYS
        (or STUB_RELAYER_PRIVATE_KEY for the first), otherwise (a loopback node, checked at
        validation) the dev account ``localchain.relayer_account(position)``."""
        from eth_account import Account

        keys = self._private_keys()
        signers: dict[str, LocalAccount] = {}
        for position, relayer_id in enumerate(self.relayer_ids):
            if position < len(keys):
                signers[relayer_id] = Account.from_key(keys[position])
            else:
                from relay_devstack.localchain import dev_account, relayer_account

                signers[relayer_id] = dev_account(relayer_account(position))
        addresses = [signer.address for signer in signers.values()]
        if len(set(addresses)) != len(addresses):
            # a key given for one relayer is the dev account another one defaults to
            raise ValueError("two relayers have the same account: each needs its own")
        return signers

    def chain_signer(self) -> LocalAccount:
        """Chain mode: the first relayer's account."""
        return self.chain_signers()[self.relayer_ids[0]]

    @property
    def relayers(self) -> dict[str, str]:
        """relayer id -> its `from` address: in chain mode each relayer's account; otherwise
        STUB_RELAYER_ADDRESS for the first and a derived address for the others."""
        if self.chain_rpc_url is not None:
            return {rid: account.address for rid, account in self.chain_signers().items()}
        first, *others = self.relayer_ids
        return {first: self.relayer_address} | {rid: derived_address(rid) for rid in others}

    @property
    def webhook(self) -> WebhookConfig:
        return WebhookConfig(url=self.webhook_url, signing_key=self.webhook_signing_key)
