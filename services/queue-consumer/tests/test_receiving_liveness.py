"""Invariant 9 as a stateful property: from any reachable state, work waiting in an unpaused
lane with a relayer that answers and is healthy is received within seconds.

A small discrete-time model of one consumer drives the real pieces that decide whether
anything is received: ``receiving.decide`` (each poller's next step), ``receiving.probe_due``
(the consumer's own probe of each relayer), the real relayer :class:`Pool` (one or three
relayers, each with its real :class:`CircuitBreaker` on the model's clock; its routing and
its face of one circuit), and the real ``plan_retry`` (how long a message is hidden after an
attempt). Around them the model keeps
what SQS and the executor would: each lane's messages with their visibility, pollers in a long
poll, calls in flight, the in-flight cap, gasless requests held for a predecessor, and the
operator's pause switch. Hypothesis injects outages of one relayer or all, recoveries, jams
(the watch's verdict), arrivals on either lane, pauses, resumes and the passing of time, and
after every step checks that no lane has had visible work, no pause and a healthy answering
relayer for longer than ``BOUND_S`` without a receive that brought some of it in.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from types import SimpleNamespace

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from queue_consumer.circuit import CircuitBreaker, CircuitOpen, ExecutorGuard
from queue_consumer.lanes import Lane
from queue_consumer.pool import Member, Pool
from queue_consumer.retry import Failure, Policy, plan_retry
from queue_consumer.settings import ConsumerSettings
from queue_consumer.stages import receiving
from queue_consumer.stages.outcome import Outcome, circuit_open
from relay_core.executor import ErrorKind, ExecutorError
from relay_core.pool import RelayerState
from relay_core.relayers import RelayerSpec

SHIPPED = ConsumerSettings(environment="test")
STEP_S = 0.25
CALL_S = 0.25  # an executor call, answered or refused
BOUND_S = 10.0  # invariant 9: the backlog starts moving within 10 s
LANES = ("normal", "fast")
DIRECT = SimpleNamespace(type="direct", request={})  # what the routing reads of a row


@dataclass(eq=False)
class Message:
    lane: str
    visible_at: float
    held: bool  # a gasless request whose predecessor has not executed yet
    receives: int = 0
    attempts: int = 0  # its own executor calls that failed


@dataclass(eq=False)
class Poller:
    lane: Lane
    # what it waits for: a time, a change of the circuit, the switch, or messages (long poll)
    until: float | None = None
    circuit_changes: int | None = None
    switch: bool = False
    polling_until: float | None = None
    want: int = 0
    holding: list[Message] = field(default_factory=list)  # received, waiting for room


@dataclass(eq=False)
class Call:
    done_at: float
    probe: bool
    message: Message | None  # None: the consumer's own probe
    member: Member


@dataclass
class Model:
    capacity: int
    relayers: int = 1
    now: float = 1000.0
    up: list[bool] = field(default_factory=list)  # each relayer answers
    predecessor_done: bool = False
    messages: list[Message] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    for_room: list[Message] = field(default_factory=list)
    fast_run: int = 0
    starved_since: dict[str, float | None] = field(default_factory=dict)
    executed: int = 0
    rng: random.Random = field(default_factory=lambda: random.Random(7))

    def __post_init__(self) -> None:
        members = []
        for i in range(self.relayers):
            breaker = CircuitBreaker(
                failure_threshold=SHIPPED.circuit_failure_threshold,
                cooldown_s=SHIPPED.circuit_cooldown_s,
                cooldown_cap_s=SHIPPED.circuit_cooldown_cap_s,
                clock=lambda: self.now,
            )
            spec = RelayerSpec(f"relayer-{i + 1}", "", "", 0)
            guard = ExecutorGuard(breaker, SHIPPED.executor_max_in_flight)
            members.append(Member(spec, None, guard, None))  # type: ignore[arg-type]
        self.pool = Pool(
            members,
            "relayer-1",
            ordered_by_chain=True,
            clock=lambda: self.now,
            watch_interval_s=SHIPPED.relayer_watch_interval_s,
        )
        self.members = list(self.pool.members.values())
        self.up = [True] * self.relayers
        self.policy = Policy(
            max_receive_count=SHIPPED.queue_max_receive_count,
            base_s=SHIPPED.consumer_backoff_base_s,
            cap_s=SHIPPED.consumer_backoff_cap_s,
        )
        self.lanes = {
            name: Lane(name, name, f"{name}-dlq", None, pollers)  # type: ignore[arg-type]
            for name, pollers in (
                ("normal", SHIPPED.consumer_pollers),
                ("fast", SHIPPED.consumer_fast_pollers),
            )
        }
        for lane in self.lanes.values():
            lane.receiving.set()
        self.pollers = [Poller(lane) for lane in self.lanes.values() for _ in range(lane.pollers)]
        self.starved_since = dict.fromkeys(LANES)

    # --- time ---------------------------------------------------------------------------------

    def run(self, seconds: float) -> None:
        for _ in range(round(seconds / STEP_S)):
            self.now += STEP_S
            self._finish_calls()
            self._probe()
            self._give_room()
            for poller in self.pollers:
                self._turn(poller)
            self._watch()

    def in_flight(self) -> int:
        return sum(1 for c in self.calls if c.message is not None)

    def visible(self, lane: str, most: int | None = None) -> list[Message]:
        found = []
        for m in self.messages:
            if m.lane == lane and m.visible_at <= self.now:
                found.append(m)
                if len(found) == most:
                    break
        return found

    # --- pollers ------------------------------------------------------------------------------

    def _give_room(self) -> None:
        """Room goes to received messages one at a time as ``lanes.Capacity`` gives it: the
        fast lane's first, but the normal lane's after ``consumer_fast_lane_run`` shares of
        fast ones in a row while it waits, and the normal lane never into the headroom kept
        for the fast one."""
        headroom, share = self.room_shape()
        while self.for_room:
            fast = next((m for m in self.for_room if m.lane == "fast"), None)
            normal = next((m for m in self.for_room if m.lane == "normal"), None)
            if fast is not None and (
                normal is None or self.fast_run < SHIPPED.consumer_fast_lane_run * share
            ):
                if self.in_flight() >= self.capacity:
                    return
                self.fast_run = self.fast_run + 1 if normal is not None else 0
                chosen = fast
            else:
                assert normal is not None
                if self.in_flight() >= self.capacity - headroom:
                    return
                self.fast_run = 0
                chosen = normal
            self.for_room.remove(chosen)
            self._attempt(chosen)

    def room_shape(self) -> tuple[int, int]:
        """``lanes.Capacity``'s headroom for the fast lane and a normal poller's share."""
        headroom = min(10 * SHIPPED.consumer_fast_pollers, self.capacity // 2)
        return headroom, max(1, (self.capacity - headroom) // SHIPPED.consumer_pollers)

    def _turn(self, poller: Poller) -> None:
        poller.holding = [m for m in poller.holding if m in self.for_room]
        if poller.holding:  # a poller receives again once its batch all has room
            return
        if poller.polling_until is not None:
            self._long_poll(poller)
            return
        if not self._awake(poller):
            return
        decision = receiving.decide(poller.lane, [self.pool])
        poller.until = poller.circuit_changes = None
        poller.switch = False
        if isinstance(decision, receiving.Wait):
            poller.until = decision.until
            poller.switch = decision.switch
            if decision.circuit is not None:
                poller.circuit_changes = decision.circuit.changes
            return
        poller.want = decision.count
        poller.polling_until = self.now + SHIPPED.consumer_wait_time_s
        self._long_poll(poller)

    def _awake(self, poller: Poller) -> bool:
        if poller.switch:
            return poller.lane.receiving.is_set()
        if poller.circuit_changes is not None and poller.circuit_changes != self.pool.changes:
            return True
        if poller.until is not None:
            return self.now >= poller.until
        return poller.circuit_changes is None  # nothing to wait for: go on

    def _long_poll(self, poller: Poller) -> None:
        """SQS answers a long poll as soon as a message is visible, else at its end."""
        assert poller.polling_until is not None
        share = self.capacity if poller.lane.urgent else self.room_shape()[1]
        got = self.visible(poller.lane.name, min(poller.want, share))
        if not got and self.now < poller.polling_until:
            return
        poller.polling_until = None
        if not got:
            return
        self.starved_since[poller.lane.name] = None
        for message in got:
            message.receives += 1
            message.visible_at = self.now + SHIPPED.queue_visibility_timeout_s
        self.for_room.extend(got)
        poller.holding = list(got)
        self._give_room()

    # --- one message, as the stages and the worker treat it ---------------------------------

    def _attempt(self, message: Message) -> None:
        if message.held and not self.predecessor_done:
            self._hide(message, Outcome(Failure.held, retry_after_s=SHIPPED.consumer_nonce_poll_s))
            return
        member = self.pool.choose(DIRECT)  # type: ignore[arg-type]
        if member is None:
            self._hide(message, circuit_open(self.pool.retry_in()))
            return
        try:
            probe = member.breaker.admit()
        except CircuitOpen as exc:
            self._hide(message, circuit_open(exc.retry_in_s))
            return
        self.calls.append(Call(self.now + CALL_S, probe, message, member))

    def _probe(self) -> None:
        for member in self.members:
            if receiving.probe_due(member.breaker):
                self.calls.append(Call(self.now + CALL_S, member.breaker.admit(), None, member))

    def _finish_calls(self) -> None:
        for call in [c for c in self.calls if c.done_at <= self.now]:
            self.calls.remove(call)
            if self.up[self.members.index(call.member)]:
                call.member.breaker.record(None, probe=call.probe)
                if call.message is not None:
                    self.messages.remove(call.message)
                    self.executed += 1
            else:
                error = ExecutorError(ErrorKind.rate_limited, "429", retry_after_s=2)
                call.member.breaker.record(error, probe=call.probe)
                if call.message is not None:
                    call.message.attempts += 1
                    failed = Outcome(
                        Failure.rate_limited, retry_after_s=2.0, attempts=call.message.attempts
                    )
                    self._hide(call.message, failed)

    def _hide(self, message: Message, outcome: Outcome) -> None:
        plan = plan_retry(
            outcome.failure,
            message.receives,
            self.policy,
            retry_after_s=outcome.retry_after_s,
            attempts=outcome.attempts,
            rng=self.rng,
        )
        message.visible_at = self.now + plan.delay_s

    # --- the property --------------------------------------------------------------------------

    def _watch(self) -> None:
        for name, lane in self.lanes.items():
            serving = any(
                up and member.health is RelayerState.ok
                for up, member in zip(self.up, self.members, strict=True)
            )
            waiting = lane.receiving.is_set() and serving and self.visible(name, 1)
            if not waiting:
                self.starved_since[name] = None
            elif self.starved_since[name] is None:
                self.starved_since[name] = self.now


class ReceivingMachine(RuleBasedStateMachine):
    model: Model

    @initialize(
        capacity=st.sampled_from([1, 4, SHIPPED.consumer_concurrency]),
        relayers=st.sampled_from([1, 3]),
    )
    def start(self, capacity: int, relayers: int) -> None:
        self.model = Model(capacity, relayers)

    @rule(lane=st.sampled_from(LANES), count=st.integers(1, 30), held=st.booleans())
    def arrive(self, lane: str, count: int, held: bool) -> None:
        m = self.model
        count = min(count, 150 - len(m.messages))  # a bounded model
        m.messages.extend(Message(lane, m.now, held) for _ in range(count))

    @rule(which=st.integers(0, 2))
    def relayer_fails(self, which: int) -> None:
        self.model.up[which % self.model.relayers] = False

    @rule(which=st.integers(0, 2))
    def relayer_answers(self, which: int) -> None:
        self.model.up[which % self.model.relayers] = True

    @rule(which=st.integers(0, 2), state=st.sampled_from(list(RelayerState)))
    def watch_finds(self, which: int, state: RelayerState) -> None:
        """The watch's verdict on one relayer: jammed, low, paused, or ok again."""
        m = self.model
        m.pool.set_health(m.members[which % m.relayers], state)

    @rule(seconds=st.sampled_from([1.0, 5.0, 20.0, 60.0]))
    def outage(self, seconds: float) -> None:
        """Every relayer fails every call for ``seconds`` (an executor restart, a 429
        storm), then answers again."""
        m = self.model
        m.up = [False] * m.relayers
        m.run(seconds)
        m.up = [True] * m.relayers

    @rule(lane=st.sampled_from(LANES))
    def pause(self, lane: str) -> None:
        self.model.lanes[lane].receiving.clear()

    @rule(lane=st.sampled_from(LANES))
    def resume(self, lane: str) -> None:
        self.model.lanes[lane].receiving.set()

    @rule()
    def predecessor_executes(self) -> None:
        self.model.predecessor_done = True

    @rule(seconds=st.sampled_from([0.5, 2.0, 5.0, 15.0, 40.0]))
    def time_passes(self, seconds: float) -> None:
        self.model.run(seconds)

    @invariant()
    def waiting_work_is_received(self) -> None:
        m = self.model
        for lane, since in m.starved_since.items():
            starved = 0.0 if since is None else m.now - since
            assert starved <= BOUND_S, (
                f"the {lane} lane has had {len(m.visible(lane))} visible messages, no pause and "
                f"a healthy answering relayer for {starved:.1f} s without receiving any "
                f"(pool {m.pool.describe()})"
            )


ReceivingMachine.TestCase.settings = settings(
    max_examples=500,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestReceivingLiveness = ReceivingMachine.TestCase
