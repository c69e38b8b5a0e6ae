"""queue-consumer settings (env prefix ``RELAY_``; consumer knobs are ``RELAY_CONSUMER_*``)."""

from __future__ import annotations

import os
import socket

from pydantic import Field

from relay_core.settings import InfraSettings


class ConsumerSettings(InfraSettings):
    # Sized for the default concurrency: each message holds a connection only briefly.
    database_pool_size: int = Field(
        20, ge=1, le=200, description="connections per process, the most it opens (no overflow)"
    )
    executor_handler_timeout_s: float = Field(
        30.0,
        gt=0,
        description="longest the executor may still act on a request we gave up on "
        "(OZ Relayer's REQUEST_TIMEOUT_SECONDS); in-doubt submits are settled after it",
    )
    consumer_submit_budget_s: float = Field(
        5.0,
        gt=0,
        description="an attempt calls the executor at most this long after stamping its claim",
    )
    executor_retention_s: float = Field(
        4 * 3600,
        gt=0,
        description="how long the executor keeps final records (OZ: TRANSACTION_EXPIRATION_HOURS)",
    )
    executor_max_in_flight: int = Field(
        100,
        ge=1,
        le=4096,
        description="executor calls in flight per process (OZ Relayer serves 100 at once: "
        "RELAYER_CONCURRENCY_LIMIT); more would only be answered 429",
    )
    executor_list_page_size: int = Field(
        100, ge=10, le=1000, description="transactions per page when an in-doubt lookup lists"
    )
    consumer_lookup_max_pages: int = Field(
        500,
        ge=1,
        le=100_000,
        description="pages an in-doubt lookup reads at most; one that cannot reach the "
        "attempt's start within them stays in doubt and is tried again later",
    )
    consumer_retry_budget_s: float = Field(
        3600.0,
        gt=0,
        description="how long transient failures (executor down, 429, 5xx, 401/403) are "
        "retried, counted from a transaction's first attempt, before it is failed",
    )
    circuit_failure_threshold: int = Field(
        5,
        ge=1,
        le=1000,
        description="consecutive executor (or database) failures that open its circuit",
    )
    circuit_cooldown_s: float = Field(
        1.0, gt=0, description="first wait before an open circuit is probed"
    )
    circuit_cooldown_cap_s: float = Field(
        5.0,
        gt=0,
        description="longest wait between probes (doubles per failed probe): once the "
        "executor or the database answers again, work moves within about this long. A probe "
        "is one cheap read (the relayer's status, SELECT 1) per consumer process",
    )
    consumer_nonce_wait_s: float = Field(
        600.0,
        gt=0,
        description="a gasless request waits at most this long (from its first turn check) "
        "for its signer's previous nonce to execute, then fails with the reason",
    )
    consumer_nonce_poll_s: float = Field(
        2.0, gt=0, description="how often a waiting gasless request checks whose turn it is"
    )

    consumer_id: str = Field(
        default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}",
        description="claim owner written on rows this process works on",
    )
    consumer_pollers: int = Field(
        4,
        ge=1,
        le=64,
        description="concurrent ReceiveMessage loops; each receives up to 10 messages, which "
        "then wait for room, and receives again once they all have it",
    )
    consumer_fast_pollers: int = Field(
        1, ge=1, le=16, description="ReceiveMessage loops on the fast lane's queue (when it is on)"
    )
    consumer_fast_lane_run: int = Field(
        4,
        ge=1,
        le=100,
        description="the fast lane is given room before the normal one at most this many times "
        "in a row while the normal lane waits (its share: at least 1 in N+1)",
    )
    consumer_concurrency: int = Field(
        320,
        ge=1,
        le=4096,
        description="messages in flight per process (320 ≈ 1,280 msg/s with a 200 ms executor: "
        "each message also spends ~40 ms on its two commits and its receive); executor calls "
        "are capped apart by RELAY_EXECUTOR_MAX_IN_FLIGHT",
    )
    consumer_db_writers: int = Field(
        2,
        ge=1,
        le=32,
        description="transactions committing status writes at once; concurrent messages' "
        "writes share them (group commit)",
    )
    consumer_write_batch: int = Field(
        64, ge=1, le=1000, description="most status writes committed in one transaction"
    )
    consumer_wait_time_s: int = Field(
        5,
        ge=0,
        le=20,
        description="long-poll wait; also the longest an idle poller takes to notice a pause",
    )
    consumer_message_timeout_s: float = Field(
        60.0,
        gt=0,
        description="budget for one message; past it the attempt is abandoned (keep it above "
        "the executor timeout, with room for an in-doubt lookup)",
    )
    consumer_backoff_base_s: float = Field(2.0, gt=0, description="first retry delay")
    consumer_backoff_cap_s: float = Field(300.0, gt=0, description="longest retry delay")
    consumer_grace_s: float = Field(
        110.0, ge=0, description="on SIGTERM, how long in-flight work may finish (ECS gives 120)"
    )
    consumer_control_interval_s: float = Field(
        2.0,
        gt=0,
        le=30,
        description="how often the lane's pause/drain switch is read and this consumer's "
        "report written (`relay queues status`)",
    )
    consumer_reaper_interval_s: float = Field(
        30.0, gt=0, description="how often stale claims are checked"
    )
    consumer_stale_claim_s: float = Field(
        900.0, gt=0, description="a processing claim untouched this long is returned to pending"
    )
    consumer_reconcile_interval_s: float = Field(
        60.0, gt=0, description="how often stranded rows are reconciled (`relay reconcile`)"
    )
    consumer_health_port: int = Field(
        0,
        ge=0,
        le=65535,
        description="serve GET /health and GET /metrics (Prometheus) on HOST:PORT (0 = off)",
    )
    consumer_health_host: str = Field(
        "127.0.0.1",
        description="the address of that port: 0.0.0.0 in a container, for the health check "
        "and the metrics scraper",
    )
    consumer_heartbeat_file: str = Field(
        "/tmp/queue-consumer.heartbeat",  # noqa: S108
        description="touched every few seconds; `queue-consumer --check` reads it",
    )
    tracker_enabled: bool = Field(True, description="poll the executor for stale statuses")
    tracker_interval_s: float = Field(2.0, gt=0, description="how often the tracker looks")
    tracker_stale_s: float = Field(
        15.0, gt=0, description="submitted/mined rows not updated this long are polled"
    )
    tracker_batch: int = Field(200, ge=1, le=5000, description="rows per tracker pass")
    tracker_concurrency: int = Field(16, ge=1, le=256, description="executor GETs in flight")
    tracker_follow_interval_s: float = Field(
        1.0,
        ge=0,
        description="how often the executor's lists of each relayer's mined and final "
        "transactions are read, for the statuses of those this consumer sent (prompt without "
        "webhooks); 0: off",
    )
    tracker_follow_page_size: int = Field(
        200, ge=1, le=1000, description="transactions per page of the follower's list reads"
    )
    tracker_follow_max_pages: int = Field(
        10,
        ge=1,
        le=100,
        description="pages of one list the follower reads per relayer and read, at most (a "
        "read cut short marks nothing heard of, and what it did not reach is the tracker's)",
    )
    tracker_follow_capacity: int = Field(
        20000,
        ge=1,
        description="transactions followed at once; more are left to the tracker's own polls",
    )
    tracker_follow_max_age_s: float = Field(
        600.0,
        gt=0,
        description="a followed transaction that has not moved this long is left to the tracker",
    )
    notify_enabled: bool = Field(True, description="deliver client status notifications")
    notify_interval_s: float = Field(0.5, gt=0, description="how often due notifications are sent")
    notify_timeout_s: float = Field(5.0, gt=0, description="timeout of one delivery")
    notify_concurrency: int = Field(16, ge=1, le=256, description="deliveries in flight")
    notify_per_client: int = Field(
        4, ge=1, le=64, description="deliveries in flight per client (a slow one waits alone)"
    )
    notify_max_age_s: float = Field(
        3600.0, gt=0, description="a notification undelivered this long is abandoned"
    )
    notify_backoff_cap_s: float = Field(60.0, gt=0, description="longest retry delay")
    status_cache_terminal_ttl_s: int = Field(600, ge=1, description="Redis TTL, final status")
    status_cache_active_ttl_s: int = Field(10, ge=1, description="Redis TTL, other statuses")
    log_level: str = Field("INFO", description="DEBUG | INFO | WARNING | ERROR")
