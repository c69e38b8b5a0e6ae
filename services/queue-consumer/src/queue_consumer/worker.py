"""The consumer: one message's walk, stage after stage (DESIGN §2), and the loops around it.

    receive (stages/receiving: lanes, circuits, parse, the batch's rows)
      → claim (stages/claiming: may this delivery work on the row?)
      → submit (stages/submitting: gates, the claim and the executor call, in-doubt settle)
      → record (stages/recording: each write a compare-and-set, group-committed, then Redis)
      → settle (stages/settling: delete, back-off, requeue or dead-letter; heartbeats)

Around it: the lanes and the room they share (``lanes.py``), the executor and database
circuits (``circuit.py``: while one is open, messages wait in SQS), the operator's switch
(``switch.py``: paused, a lane receives nothing), the background jobs (``housekeeping.py``),
and a graceful drain on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from queue_consumer import housekeeping, metrics
from queue_consumer.circuit import CircuitBreaker, probe_when_due
from queue_consumer.lanes import Capacity, Deleter, Lane
from queue_consumer.notifications.service import Notifier
from queue_consumer.pool import Pool
from queue_consumer.retry import Failure
from queue_consumer.settings import ConsumerSettings
from queue_consumer.stages import outcome as outcomes
from queue_consumer.stages.claiming import Claims
from queue_consumer.stages.gates import NonceTurn, SpendGate
from queue_consumer.stages.outcome import Outcome
from queue_consumer.stages.receiving import Admission, Body, Receiver
from queue_consumer.stages.recording import Recorder
from queue_consumer.stages.settling import Settler
from queue_consumer.stages.submitting import Submitter
from queue_consumer.switch import Switch
from queue_consumer.tracking.follow import Follower
from queue_consumer.tracking.receipts import FeeSettler
from queue_consumer.tracking.service import Tracker
from queue_consumer.transactions.group_commit import GroupCommit
from queue_consumer.watch import Watch
from relay_core import evm, tracing
from relay_core.db.models import Transaction
from relay_core.queue import PoisonMessage, trace_attributes
from relay_core.reconcile import Reconciler
from relay_core.tasks import cancel_all

log = logging.getLogger(__name__)


@dataclass
class Stats:
    counts: Counter[str] = field(default_factory=Counter)
    started: float = field(default_factory=time.monotonic)

    def summary(self) -> dict[str, Any]:
        return {"uptime_s": round(time.monotonic() - self.started, 1), **dict(self.counts)}


class Consumer:
    def __init__(
        self,
        settings: ConsumerSettings,
        sqs: Any,
        lanes: dict[str, tuple[str, str]],
        claims: Claims,
        submitter: Submitter,
    ) -> None:
        """``lanes``: each lane's (queue URL, DLQ URL); the fast lane, when there is one,
        is received first (``Capacity``)."""
        self.settings = settings
        self.claims = claims
        self.submitter = submitter
        self.writes = claims.recorder.writes
        self.lanes = [
            Lane(
                name,
                queue_url,
                dlq_url,
                Deleter(sqs, queue_url),
                settings.consumer_fast_pollers if name == "fast" else settings.consumer_pollers,
            )
            for name, (queue_url, dlq_url) in lanes.items()
        ]
        for lane in self.lanes:
            lane.receiving.set()
        fast = [lane for lane in self.lanes if lane.urgent]
        self.capacity = Capacity(
            settings.consumer_concurrency,
            settings.consumer_pollers,
            fair_every=settings.consumer_fast_lane_run,
            # one batch per fast poller is always there for the fast lane
            headroom=sum(10 * lane.pollers for lane in fast),
        )
        self.stats = Stats()
        self.stopping = asyncio.Event()
        self._work: set[asyncio.Task[None]] = set()
        self._requeueing: asyncio.Task[None] | None = None
        # The relayer pool is one circuit to the receivers: closed while a relayer takes work.
        self.pool: Pool = submitter.pool
        self.breaker = self.pool
        self.watch: Watch | None = None
        # Nothing can be claimed or recorded while the database does not answer: its circuit
        # stops the pollers as the executor's does, and a probe of its own reopens them.
        self.database = CircuitBreaker(
            name="database",
            failure_threshold=settings.circuit_failure_threshold,
            cooldown_s=settings.circuit_cooldown_s,
            cooldown_cap_s=settings.circuit_cooldown_cap_s,
            is_outage=outcomes.database_down,
        )
        self.circuits = (self.breaker, self.database)
        self.receiver = Receiver(
            settings, sqs, self.capacity, self.circuits, claims, self._start, self._sqs_back
        )
        self.settler = Settler(settings, sqs, self.stats.counts)
        self.tracker: Tracker | None = None
        self.follower: Follower | None = None
        self.fees: FeeSettler | None = None
        self.notifier: Notifier | None = None
        self.reconciler: Reconciler | None = None
        self.switch = Switch(
            self.lanes,
            claims.sessions,
            sqs,
            settings.consumer_id,
            circuit=lambda: self.breaker.state.value,
        )
        metrics.watch(lambda: len(self._work), lambda: self.breaker.state.value)

    def lane(self, name: str) -> Lane:
        return next(lane for lane in self.lanes if lane.name == name)

    # --- lifecycle --------------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        """Consume until ``stopping`` is set, then drain. Returns the summary."""
        self.writes.start()
        for lane in self.lanes:
            lane.deleter.start()
        # A consumer started while a lane is paused (a deploy, autoscaling) must not receive
        # from it before it has read the switch.
        with contextlib.suppress(Exception):
            await self.switch.follow()
        if self.reconciler is not None:  # how old the queues are now, to tell if they change
            with contextlib.suppress(Exception):
                await self.reconciler.requeue_lost()
        pollers = [
            asyncio.create_task(
                self.receiver.poll(lane, i, self.stopping), name=f"poller-{lane.name}-{i}"
            )
            for lane in self.lanes
            for i in range(lane.pollers)
        ]
        background = [
            asyncio.create_task(job, name=name) for name, job in self._background().items()
        ]
        await self.stopping.wait()
        log.info("consumer.stopping", extra={"in_flight": len(self._work)})
        await cancel_all(background)
        await self.receiver.stop(pollers)
        if self._requeueing is not None:
            background.append(self._requeueing)
        await asyncio.gather(*background, return_exceptions=True)
        abandoned = await self._drain(self.settings.consumer_grace_s)
        await self.writes.stop()
        for lane in self.lanes:
            await lane.deleter.stop()
        with contextlib.suppress(Exception):
            await self.switch.report(stopped=True)
        summary = self.stats.summary() | {
            "abandoned": abandoned,
            "circuitOpened": self.breaker.opened,
            "notified": self.notifier.delivered if self.notifier else 0,
        }
        log.info("consumer.stopped", extra=summary)
        return summary

    def _background(self) -> dict[str, Coroutine[Any, Any, Any]]:
        """The jobs beside the message path (``housekeeping``), by task name."""
        settings, counts = self.settings, self.stats.counts
        every = housekeeping.every
        jobs = {
            "reaper": housekeeping.reaper(self.claims, settings.consumer_reaper_interval_s, counts),
            "heartbeat-file": housekeeping.heartbeat_file(
                settings.consumer_heartbeat_file, self._describe
            ),
            "switch": self.switch.watch(settings.consumer_control_interval_s),
            "database-probe": probe_when_due(
                self.database,
                housekeeping.database_probe(self.claims.sessions),
                settings.database_connect_timeout_s + settings.database_pool_timeout_s,
            ),
        }
        for name, member in self.pool.members.items():
            jobs[f"executor-probe-{name}"] = probe_when_due(
                member.breaker,
                housekeeping.executor_probe(member.guard, member.client),
                settings.executor_timeout_s,
            )
        if self.watch is not None:
            jobs["relayer-watch"] = self.watch.run()
        if self.tracker is not None:
            jobs["tracker"] = every(
                settings.tracker_interval_s,
                self.tracker.run_once,
                "tracker",
                counts,
                full=settings.tracker_batch,
            )
        if self.follower is not None:
            jobs["follower"] = self.follower.run()
        if self.fees is not None:
            jobs["fee-settler"] = every(
                settings.tracker_interval_s,
                self.fees.run_once,
                "fees",
                counts,
                full=self.fees.batch,
            )
        if self.notifier is not None:
            jobs["notifier"] = self.notifier.run(settings.notify_interval_s)
        if self.reconciler is not None:
            jobs["reconciler"] = every(
                settings.consumer_reconcile_interval_s, self._reconcile, "reconcile", counts
            )
        return jobs

    async def _reconcile(self) -> int:
        return await housekeeping.reconcile(
            self.reconciler, self.lanes, self.circuits, self.stats.counts
        )

    def _describe(self) -> dict[str, Any]:
        return {
            "consumer": self.settings.consumer_id,
            "lanes": {lane.name: self.switch.state(lane) for lane in self.lanes},
            "circuit": self.breaker.state.value,
            "databaseCircuit": self.database.state.value,
            "inFlight": len(self._work),
            "received": self.stats.counts["received"],
        }

    async def _drain(self, grace_s: float) -> int:
        if not self._work:
            return 0
        _, pending = await asyncio.wait(set(self._work), timeout=grace_s)
        for task in pending:  # their messages reappear after the visibility timeout
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        return len(pending)

    def _sqs_back(self) -> None:
        """SQS answers again after failing: rows whose messages it lost are enqueued again."""
        if self.reconciler is None or (self._requeueing and not self._requeueing.done()):
            return
        self._requeueing = asyncio.create_task(
            housekeeping.requeue_lost(self.reconciler, self.stats.counts), name="requeue-lost"
        )

    # --- one message ------------------------------------------------------------------------

    def _start(
        self,
        lane: Lane,
        message: dict[str, Any],
        body: Body,
        snapshot: Transaction | None,
        admission: Admission | None,
    ) -> None:
        task = asyncio.create_task(self._handle(lane, message, body, snapshot, admission))
        self._work.add(task)
        lane.work.add(task)
        task.add_done_callback(self._work.discard)
        task.add_done_callback(lane.work.discard)

    async def _handle(
        self,
        lane: Lane,
        message: dict[str, Any],
        body: Body,
        snapshot: Transaction | None,
        admission: Admission | None,
    ) -> None:
        """``admission``: the message's batch, while it waits for room; None when its poller
        took room for it already."""
        holds_room = admission is None
        if admission is not None:
            try:
                await self.capacity.reserve(1, urgent=lane.urgent)
                holds_room = True
            finally:
                admission.one_in()
        try:
            await self._work_on(lane, message, body, snapshot)
        finally:
            if holds_room:
                await self.capacity.release()

    async def _work_on(
        self, lane: Lane, message: dict[str, Any], body: Body, snapshot: Transaction | None
    ) -> None:
        started = time.monotonic()
        receive_count = int(message.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
        message_id = str(message.get("MessageId"))
        context: dict[str, Any] = {"messageId": message.get("MessageId")}
        heartbeat = None
        # This task's own context: the accepting request's id and trace go on every log line
        # and on the executor calls made for this message.
        request_id, traceparent = trace_attributes(message)
        trace = tracing.begin(request_id, traceparent, name="relay.process", kind="consumer")
        tracing.activate(trace)
        try:
            self.stats.counts["received"] += 1
            lane.received += 1
            metrics.RECEIVED.inc(lane.name)
            if isinstance(body, PoisonMessage):
                outcome = Outcome(Failure.poison, str(body), action="poison")
            else:
                tx_id = context["transactionId"] = body.transaction_id
                heartbeat = self.settler.heartbeat(
                    lane, message, lambda: self.claims.touch(tx_id, message_id)
                )
                outcome = await self._attempt(tx_id, message_id, snapshot)
                self.database.record(outcome.database_error, probe=False)
            await self.settler.settle(lane, message, outcome, receive_count, context, started)
        except asyncio.CancelledError:
            # Shutdown past the grace period: leave the message to reappear.
            self.stats.counts["abandoned"] += 1
            raise
        except Exception:
            self.stats.counts["errors"] += 1
            metrics.FAILED.inc(lane.name, "error")
            log.exception("consumer.message.error", extra=context)
        finally:
            if trace.span is not None:
                tracing.finish(trace, attributes=context)
            if heartbeat is not None:
                await heartbeat.stop()

    async def _attempt(
        self, transaction_id: str, message_id: str, snapshot: Transaction | None
    ) -> Outcome:
        """Claim, then submit (and record), within ``consumer_message_timeout_s``."""
        try:
            async with asyncio.timeout(self.settings.consumer_message_timeout_s):
                turn = await self.claims.admit(transaction_id, message_id, snapshot)
                if isinstance(turn, Outcome):
                    return turn
                return await self.submitter.attempt(turn)
        except Exception as exc:  # timed out, database unavailable and the like
            # Best effort: let the next delivery proceed at once rather than wait for the
            # claim to go stale (it would take over a stale claim anyway).
            with contextlib.suppress(Exception):
                await self.claims.release(transaction_id, message_id)
            outcome = outcomes.of_error(exc, self.database.retry_in())
            if outcome is not None:
                return outcome
            log.exception("consumer.message.unexpected", extra={"transactionId": transaction_id})
            return Outcome(Failure.error, f"{type(exc).__name__}: {str(exc)[:200]}", action="error")


def build(
    settings: ConsumerSettings,
    sqs: Any,
    lanes: dict[str, tuple[str, str]],
    sessions: async_sessionmaker[AsyncSession],
    pool: Pool,
    writes: GroupCommit,
    rpc: evm.EvmRpc | None = None,
    follower: Follower | None = None,
) -> Consumer:
    """The consumer and its stages, wired (the gasless nonce turn needs the chain's RPC)."""
    recorder = Recorder(sessions, writes, pool, settings.executor_timeout_s, follower)
    claims = Claims(settings, sessions, recorder)
    submitter = Submitter(
        settings,
        pool,
        recorder,
        SpendGate(settings, sessions, recorder, rpc),
        NonceTurn(settings, recorder, rpc) if rpc is not None else None,
    )
    consumer = Consumer(settings, sqs, lanes, claims, submitter)
    consumer.watch = Watch(pool, sessions, settings, rpc)
    consumer.follower = follower
    return consumer
