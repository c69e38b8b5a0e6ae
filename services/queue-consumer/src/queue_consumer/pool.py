"""The relayer pool as the consumer sees it: each relayer's client, circuit and state, the
choice of a relayer for each transaction, and the pool's one face to the receivers.

**Members.** Each relayer of the pool (relay_core.relayers) has its own executor client, its
own circuit breaker (a relayer whose executor fails takes no new work; the others carry on),
its own in-doubt lookup, and a slot of the in-flight limit of the executor instance serving it
(shared by the relayers of one URL). Its state (relay_core.pool) is ``ok`` only while its
circuit is closed and it is neither paused, jammed nor low.

**Routing** (``choose``): a transaction goes to the ``ok`` relayer with the least in flight
(its submitted rows as last counted, plus what this process sent it since), ties broken at
random so that consumers do not all pick the same one. It is recorded on the row with the
attempt's stamp, in one compare-and-set, before the call: an attempt in doubt is looked up
at the relayer it went to, and so is every later question about the transaction. Gasless
requests keep nonce order however they are spread: with the chain's RPC a request is sent only
once the forwarder expects its nonce (stages.gates.NonceTurn), so its predecessors have
executed, whoever relayed them. Without the RPC order is left to the executor, and a signer's
requests all go to one relayer (by a hash of the signer), held while that one cannot take them.

**The receivers' face** (``state``, ``reopens_at``, ``wait_change``): the pool behaves as one
circuit that is closed while any relayer takes work. Liveness (invariant 9) holds for it as for
one breaker: while no relayer's circuit is closed but one is half-open, that relayer's prober
decides it within its timeout; while every healthy relayer's circuit is open, the earliest
turns half-open by the clock; while no relayer is healthy (all paused, jammed or low), the
watch (``Watch``) looks again every ``relayer_watch_interval_s`` and the receivers with it.
Nothing can be sent then: messages wait in SQS without spending receive counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import zlib
from collections.abc import Callable, Iterable
from typing import Any

from queue_consumer.circuit import CircuitBreaker, CircuitState, ExecutorGuard
from queue_consumer.transactions.lookup import ExecutorLookup
from relay_core.db.models import Transaction
from relay_core.executor import ExecutorClient
from relay_core.pool import Held, RelayerState
from relay_core.relayers import RelayerSpec
from relay_core.statuses import TxType


class Member:
    """One relayer of the pool."""

    def __init__(
        self,
        spec: RelayerSpec,
        client: ExecutorClient,
        guard: ExecutorGuard,
        lookup: ExecutorLookup,
    ) -> None:
        self.id = spec.id
        self.spec = spec
        self.client = client
        self.guard = guard
        self.breaker = guard.breaker
        self.lookup = lookup
        self.health = RelayerState.ok  # paused, jammed or low, as the watch last found
        self.detail = ""
        self.held = Held()
        self.routed = 0  # sent by this process since its submitted rows were last counted
        self.balance_wei: int | None = None
        self.last_mined_at: Any = None

    @property
    def state(self) -> RelayerState:
        if self.health is RelayerState.paused:
            return self.health
        if not self.breaker.closed:
            return RelayerState.open
        return self.health

    def takes_work(self) -> bool:
        return self.health is RelayerState.ok and self.breaker.closed

    def load(self) -> int:
        return self.held.count + self.routed

    def describe(self) -> dict[str, Any]:
        return {
            "state": self.state.value,
            "inFlight": self.load(),
            "circuit": self.breaker.describe(),
            **({"detail": self.detail} if self.detail else {}),
        }


class Pool:
    """Every member, the routing, and the face of one circuit for the receivers."""

    name = "executor"

    def __init__(
        self,
        members: Iterable[Member],
        default: str,
        *,
        ordered_by_chain: bool,
        clock: Callable[[], float] | None = None,
        watch_interval_s: float = 5.0,
        retired: Callable[[str], Member] | None = None,
    ) -> None:
        """``retired``: builds the member of a relayer a row names that is no longer in the
        pool (asked about what it holds, never given work)."""
        self.members = {member.id: member for member in members}
        self.retired: dict[str, Member] = {}
        self._retire = retired
        self.default = default if default in self.members else next(iter(self.members))
        self.ordered_by_chain = ordered_by_chain
        self._names = sorted(self.members)
        first = self.members[self.default].breaker
        self._clock = clock or first.now
        self._watch_interval_s = watch_interval_s
        self._changed = asyncio.Event()
        self.changes = 0  # how many times something a receiver waits on changed
        for member in self.members.values():
            member.breaker.listeners.append(self.notify)

    # --- routing ----------------------------------------------------------------------------

    def member(self, relayer: str | None) -> Member:
        """The member a row names (a row sent before pools: the default relayer). A relayer
        since taken out of the pool is still the one asked about what it holds (by its id,
        at the default's executor instance): another relayer's list would not show them,
        and an attempt in doubt would be sent again."""
        name = relayer or self.default
        found = self.members.get(name) or self.retired.get(name)
        if found is None:
            if self._retire is None:
                raise LookupError(f"relayer {name!r} is not in the pool")
            found = self.retired[name] = self._retire(name)
        return found

    def choose(self, tx: Transaction) -> Member | None:
        """The relayer to send ``tx`` to now, or None when none may take it."""
        if tx.type == TxType.gasless and not self.ordered_by_chain:
            signer = str(tx.request.get("request", {}).get("from", "")).lower()
            home = self.members[self._names[zlib.crc32(signer.encode()) % len(self._names)]]
            chosen = home if home.takes_work() else None
        else:
            ready = [m for m in self.members.values() if m.takes_work()]
            chosen = min(ready, key=lambda m: (m.load(), random.random())) if ready else None
        if chosen is not None:
            chosen.routed += 1
        return chosen

    # --- one circuit, for the receivers ---------------------------------------------------------

    @property
    def state(self) -> CircuitState:
        members = self.members.values()
        if any(m.takes_work() for m in members):
            return CircuitState.closed
        healthy = [m for m in members if m.health is RelayerState.ok]
        if any(m.breaker.state is CircuitState.half_open for m in healthy):
            return CircuitState.half_open
        return CircuitState.open

    @property
    def closed(self) -> bool:
        return self.state is CircuitState.closed

    @property
    def reopens_at(self) -> float:
        """When a relayer may take work again, as far as the clock can tell: the earliest
        open circuit's turn to half-open, or the watch's next look."""
        healthy = [m.breaker for m in self.members.values() if m.health is RelayerState.ok]
        opens = [b.reopens_at for b in healthy if b.state is CircuitState.open]
        return min(opens) if opens else self._clock() + self._watch_interval_s

    def now(self) -> float:
        return self._clock()

    def retry_in(self) -> float:
        if self.closed:
            return 0.0
        return max(1.0, self.reopens_at - self._clock())

    @property
    def opened(self) -> int:
        return sum(m.breaker.opened for m in self.members.values())

    @property
    def breakers(self) -> list[CircuitBreaker]:
        return [m.breaker for m in self.members.values()]

    def describe(self) -> dict[str, Any]:
        return {
            "state": self.state.value,
            "relayers": {name: m.describe() for name, m in self.members.items()},
        }

    def notify(self) -> None:
        """Something a receiver waits on changed: a circuit, or a relayer's state."""
        self.changes += 1
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_change(self, until: float | None) -> None:
        event = self._changed
        timeout = None if until is None else max(0.0, until - self._clock())
        with contextlib.suppress(TimeoutError):
            limit = None if timeout is None else timeout + random.uniform(0, 0.05)
            await asyncio.wait_for(event.wait(), limit)

    @property
    def in_flight(self) -> int:
        """Executor calls in flight (every relayer's)."""
        return sum(m.guard.in_flight for m in self.members.values())

    def set_health(self, member: Member, health: RelayerState, detail: str = "") -> bool:
        """The watch's verdict on ``member``; True (and receivers woken) if it changed."""
        member.detail = detail
        if member.health is health:
            return False
        member.health = health
        self.notify()
        return True
