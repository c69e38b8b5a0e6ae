"""ORM models. Alembic migrations in ``relay_core.migrations`` must match these exactly."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from relay_core import ids

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# Microsecond timestamps on MySQL/MariaDB: stage latencies are reported in milliseconds.
Timestamp = DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
BigId = BigInteger().with_variant(Integer(), "sqlite")


def utcnow() -> datetime:
    """Naive UTC: what both MySQL DATETIME and SQLite store."""
    return datetime.now(UTC).replace(tzinfo=None)


def new_id() -> str:
    return ids.uuid4()


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class ApiClient(Base):
    __tablename__ = "api_clients"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(100))
    role: Mapped[str] = mapped_column(String(16), default="client")
    # sha256 of the key; the key itself is shown once at creation and never stored.
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    key_prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(Timestamp, default=None)
    # Status notifications: where to POST them, and the secret that signs them.
    callback_url: Mapped[str | None] = mapped_column(String(2048), default=None)
    callback_secret: Mapped[str | None] = mapped_column(String(128), default=None)
    # This client's rate limit (a token bucket); None: the deployment's default.
    rate_limit_per_s: Mapped[float | None] = mapped_column(Float, default=None)
    rate_limit_burst: Mapped[int | None] = mapped_column(Integer, default=None)
    # Its spend policy (relay_core.policy); None: no limit. Wei as decimal strings.
    policy_allowed_to: Mapped[list[str] | None] = mapped_column(JSON, default=None)
    policy_max_value_wei: Mapped[str | None] = mapped_column(String(78), default=None)
    policy_daily_value_wei: Mapped[str | None] = mapped_column(String(78), default=None)
    policy_max_gas: Mapped[int | None] = mapped_column(BigInteger, default=None)
    policy_gasless_value: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")
    # Fees (gas x its price) the wallet pays for it: per transaction, and per rolling 24 hours
    # (reserved at accept at the most a transaction can cost, settled from its receipt).
    policy_max_fee_wei: Mapped[str | None] = mapped_column(String(78), default=None)
    policy_daily_fee_wei: Mapped[str | None] = mapped_column(String(78), default=None)
    # The speeds it may ask for (fastest pays twice safeLow's price); None: any.
    policy_speeds: Mapped[list[str] | None] = mapped_column(JSON, default=None)
    # Written by each daily-budget reservation: the lock that makes them one at a time.
    policy_spend_lock: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # When an operator granted this client a spend policy (and who): until then it may submit
    # nothing (relay_core.policy, rule ``noPolicy``).
    policy_granted_at: Mapped[datetime | None] = mapped_column(Timestamp, default=None)
    policy_granted_by: Mapped[str | None] = mapped_column(String(200), default=None)


class ClientSpend(Base):
    """Value reserved against a client's daily budget, per five minutes (relay_core.spending)."""

    __tablename__ = "client_spend"

    client_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("api_clients.id"), primary_key=True
    )
    bucket: Mapped[datetime] = mapped_column(Timestamp, primary_key=True)
    value_wei: Mapped[str] = mapped_column(String(80))
    fee_wei: Mapped[str] = mapped_column(String(80), default="0", server_default="0")


class AuditEntry(Base):
    """What an admin or operator did (relay_core.audit): who, when, to what, before and after.
    Appended in the same transaction as the change it records; never updated."""

    __tablename__ = "audit_log"
    __table_args__ = (Index(None, "at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    # The key's client (id, name, role), or for the `relay` command: None, "cli user@host", cli.
    actor_id: Mapped[str | None] = mapped_column(String(36), default=None)
    actor_name: Mapped[str] = mapped_column(String(200))
    actor_role: Mapped[str] = mapped_column(String(16))
    action: Mapped[str] = mapped_column(String(64))  # e.g. client.policy, lane.pause, dlq.purge
    target_kind: Mapped[str] = mapped_column(String(32))  # client | lane | dlq
    target_id: Mapped[str | None] = mapped_column(String(200), default=None)
    target_name: Mapped[str | None] = mapped_column(String(200), default=None)
    before: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    after: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)


class QueueControl(Base):
    """An operator's switch for one lane of work (relay_core.controls): consumers read it every
    few seconds. No row: running."""

    __tablename__ = "queue_controls"

    lane: Mapped[str] = mapped_column(String(32), primary_key=True)
    state: Mapped[str] = mapped_column(String(16))  # running | paused | draining
    reason: Mapped[str | None] = mapped_column(String(500), default=None)
    changed_by: Mapped[str] = mapped_column(String(100))
    changed_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)


class ConsumerReport(Base):
    """What each consumer process last said of itself, per lane it serves (every few seconds
    while it runs)."""

    __tablename__ = "consumer_reports"

    consumer_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    lane: Mapped[str] = mapped_column(String(32), primary_key=True)
    state: Mapped[str] = mapped_column(String(16))  # running | pausing | paused | stopped
    in_flight: Mapped[int] = mapped_column(Integer, default=0)
    received: Mapped[int] = mapped_column(BigInteger, default=0)
    circuit: Mapped[str] = mapped_column(String(16))
    started_at: Mapped[datetime] = mapped_column(Timestamp)
    seen_at: Mapped[datetime] = mapped_column(Timestamp)


class RelayerControl(Base):
    """An operator's switch for one relayer of the pool (relay_core.pool): paused, it takes no
    new work. No row: running."""

    __tablename__ = "relayer_controls"

    relayer: Mapped[str] = mapped_column(String(64), primary_key=True)
    state: Mapped[str] = mapped_column(String(16))  # running | paused
    reason: Mapped[str | None] = mapped_column(String(500), default=None)
    changed_by: Mapped[str] = mapped_column(String(100))
    changed_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)


class RelayerReport(Base):
    """What the consumers last saw of one relayer (rewritten every few seconds): its state
    (ok, jammed, low, open, paused), what it holds, its balance."""

    __tablename__ = "relayer_reports"

    relayer: Mapped[str] = mapped_column(String(64), primary_key=True)
    state: Mapped[str] = mapped_column(String(16))
    detail: Mapped[str | None] = mapped_column(String(500), default=None)
    submitted: Mapped[int] = mapped_column(Integer, default=0)
    oldest_submitted_at: Mapped[datetime | None] = mapped_column(Timestamp, default=None)
    balance_wei: Mapped[str | None] = mapped_column(String(78), default=None)
    balance_at: Mapped[datetime | None] = mapped_column(Timestamp, default=None)
    last_mined_at: Mapped[datetime | None] = mapped_column(Timestamp, default=None)
    seen_by: Mapped[str] = mapped_column(String(200))
    seen_at: Mapped[datetime] = mapped_column(Timestamp)


class Transaction(Base):
    __tablename__ = "transactions"
    __table_args__ = (
        UniqueConstraint("client_id", "idempotency_key"),
        # A gasless (from, nonce) may be in flight once; the key is cleared when it ends.
        UniqueConstraint("inflight_key"),
        Index(None, "status", "updated_at"),
        Index(None, "created_at"),
        Index(None, "status", "enqueued_at", "created_at"),
        Index(None, "client_id", "created_at"),
        # One executor transaction belongs to at most one row: an in-doubt lookup that adopts
        # a record another row holds fails here, and the loser decides afresh.
        UniqueConstraint("executor_tx_id"),
        Index(None, "status", "last_synced_at"),
        Index(None, "upstream_missing_since"),
        # The fee reservations still to settle (relay_core.spending): few, among many settled.
        Index(None, "status", "reserved_fee_wei"),
        # The transactions on chain whose cost is still to be read from their receipt
        # (queue_consumer.tracking.receipts): few, among many whose cost is known.
        Index(None, "status", "fee_wei", "updated_at"),
        # What each relayer of the pool holds (relay_core.pool): its submitted rows, oldest first.
        Index(None, "status", "relayer", "submitted_at"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    client_id: Mapped[str] = mapped_column(ForeignKey("api_clients.id"))
    type: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), default="pending")
    # Bumped on every change; orders cache writes so an older entry never replaces a newer one.
    version: Mapped[int] = mapped_column(Integer, default=1)
    request: Mapped[dict[str, Any]] = mapped_column(JSON)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    hash: Mapped[str | None] = mapped_column(String(66), default=None)
    executor_tx_id: Mapped[str | None] = mapped_column(String(64), default=None)
    # The relayer of the pool it was sent to, written with the attempt's stamp; every later
    # question goes there. None: sent before pools, to RELAY_EXECUTOR_RELAYER_ID.
    relayer: Mapped[str | None] = mapped_column(String(64), default=None)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # When the first attempt claimed the row: transient failures are retried within a time
    # budget counted from here (not from acceptance, so a queue backlog does not spend it).
    first_attempt_at: Mapped[datetime | None] = mapped_column(Timestamp, default=None)
    idempotency_key: Mapped[str | None] = mapped_column(String(255), default=None)
    request_fingerprint: Mapped[str] = mapped_column(String(64))
    inflight_key: Mapped[str | None] = mapped_column(String(130), default=None)
    valid_until: Mapped[datetime | None] = mapped_column(Timestamp, default=None)
    enqueued_at: Mapped[datetime | None] = mapped_column(Timestamp, default=None)
    claimed_by: Mapped[str | None] = mapped_column(String(64), default=None)
    claimed_at: Mapped[datetime | None] = mapped_column(Timestamp, default=None)
    submit_started_at: Mapped[datetime | None] = mapped_column(Timestamp, default=None)
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    submitted_at: Mapped[datetime | None] = mapped_column(Timestamp, default=None)
    confirmed_at: Mapped[datetime | None] = mapped_column(Timestamp, default=None)
    # When the executor's view was last read (webhook, tracker or status refresh).
    last_synced_at: Mapped[datetime | None] = mapped_column(Timestamp, default=None)
    # Since when the executor answers 404 for ``executor_tx_id`` (None while it knows it): the
    # reconciler gives such a row a final status once this is old enough.
    upstream_missing_since: Mapped[datetime | None] = mapped_column(Timestamp, default=None)
    # How often the reconciler found this row's message dead-lettered by the redrive policy
    # and enqueued it again (the second time, the row is failed instead).
    dead_letters: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # fast (asked for speed fast or fastest, when the fast lane is on) or normal: which queue
    # carries its messages.
    lane: Mapped[str] = mapped_column(String(8), default="normal", server_default="normal")
    # Effective callback for status notifications (the request's, else the client's).
    callback_url: Mapped[str | None] = mapped_column(String(2048), default=None)
    # Its reservation against the client's daily budgets (relay_core.spending): the five
    # minutes it is counted in, and the fee reserved (the most it can cost), settled to the
    # receipt's fee (``fee_settled_at``) once mined.
    spend_bucket: Mapped[datetime | None] = mapped_column(Timestamp, default=None)
    reserved_fee_wei: Mapped[str | None] = mapped_column(String(78), default=None)
    fee_settled_at: Mapped[datetime | None] = mapped_column(Timestamp, default=None)
    # What it cost, from its receipt, once it reached the chain and the consumer read that
    # (with RELAY_CHAIN_RPC_URL; None until then, ``fee_settled_at`` says when): block, gas
    # used, price per gas, fee (gas x price).
    block_number: Mapped[int | None] = mapped_column(BigInteger, default=None)
    gas_used: Mapped[int | None] = mapped_column(BigInteger, default=None)
    effective_gas_price: Mapped[str | None] = mapped_column(String(78), default=None)
    fee_wei: Mapped[str | None] = mapped_column(String(78), default=None)
    # When its client asked to cancel it while it could not be canceled there and then (a
    # consumer held it, about to call the executor): the consumer cancels it at the executor
    # once it has its id, or, if it goes back to waiting, cancels it before any new attempt.
    cancel_requested_at: Mapped[datetime | None] = mapped_column(Timestamp, default=None)


class TransactionEvent(Base):
    """Audit trail: one row per status change after creation (the row itself records creation)."""

    __tablename__ = "transaction_events"
    __table_args__ = (
        Index(None, "transaction_id", "id"),
        Index(None, "created_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    transaction_id: Mapped[str] = mapped_column(ForeignKey("transactions.id", ondelete="CASCADE"))
    from_status: Mapped[str | None] = mapped_column(String(16))
    to_status: Mapped[str] = mapped_column(String(16))
    source: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)


class WebhookReceipt(Base):
    """Executor webhook ids already applied: a replayed delivery is acknowledged, not reapplied.
    Kept for ``RELAY_WEBHOOK_RECEIPT_RETENTION_S`` (relay_api.webhooks.service.prune); an older
    replay is applied again, harmlessly (statuses only move forward)."""

    __tablename__ = "webhook_receipts"
    __table_args__ = (Index(None, "received_at"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    received_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)


class Notification(Base):
    """Outbox of client callbacks, written with the status change it reports.

    Delivered in ``id`` order per transaction: a later one waits until the earlier one was
    delivered or abandoned.
    """

    __tablename__ = "notifications"
    __table_args__ = (
        Index(None, "state", "next_attempt_at"),
        Index(None, "transaction_id", "id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    transaction_id: Mapped[str] = mapped_column(ForeignKey("transactions.id", ondelete="CASCADE"))
    client_id: Mapped[str] = mapped_column(String(36))
    url: Mapped[str] = mapped_column(String(2048))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16), default="pending")  # pending|delivered|abandoned
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text, default=None)
    next_attempt_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    delivered_at: Mapped[datetime | None] = mapped_column(Timestamp, default=None)


# The tables behind the entities, for Core statements on hot paths: a statement on an entity
# goes through the ORM's machinery (bulk DML, WHERE evaluation against loaded objects), which
# costs more CPU than the round trip it makes.
TRANSACTIONS: Table = Transaction.__table__  # type: ignore[assignment]
TRANSACTION_EVENTS: Table = TransactionEvent.__table__  # type: ignore[assignment]
NOTIFICATIONS: Table = Notification.__table__  # type: ignore[assignment]
