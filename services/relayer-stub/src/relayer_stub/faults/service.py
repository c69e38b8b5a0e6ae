"""Decides, per request, which configured fault fires. Deterministic given the seed and the
order of requests: ``*_next`` counters count down, rates draw from one seeded RNG, and the RNG
is only consulted for a rate that is above zero."""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter
from collections.abc import Callable

from relayer_stub.errors import RateLimitedFault, ServerErrorFault
from relayer_stub.faults.schemas import FaultConfig

log = logging.getLogger(__name__)


class FaultInjector:
    def __init__(self, config: FaultConfig) -> None:
        self._config = config
        self._rng = random.Random(config.seed)
        self._jammed: frozenset[str] = frozenset()
        self._listeners: list[Callable[[], None]] = []
        self.injected: Counter[str] = Counter()
        self.configure(config)

    @property
    def config(self) -> FaultConfig:
        """The live configuration, ``*_next`` counters showing what is left."""
        return self._config.model_copy(deep=True)

    def configure(self, config: FaultConfig) -> None:
        self._config = config.model_copy(deep=True)
        self._rng = random.Random(config.seed)
        self.injected = Counter()
        jammed = frozenset(config.jam_relayers)
        if jammed != self._jammed:
            log.info("stub.fault.jam", extra={"jammed": sorted(jammed)})
        self._jammed = jammed
        for listener in self._listeners:
            listener()

    def on_configure(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after every change of configuration (a jam lifted, say)."""
        self._listeners.append(listener)

    def jammed(self, relayer_id: str) -> bool:
        """This relayer accepts sends but none of its transactions may be mined."""
        return relayer_id in self._jammed

    @property
    def jammed_relayers(self) -> list[str]:
        return sorted(self._jammed)

    def balance_override(self, relayer_id: str) -> int | None:
        """The balance (wei) set for this relayer by ``relayer_balances``, if any."""
        return self._config.relayer_balances.get(relayer_id)

    def _fires(self, next_field: str, rate: float) -> bool:
        remaining: int = getattr(self._config, next_field)
        if remaining > 0:
            setattr(self._config, next_field, remaining - 1)
            return True
        return rate > 0 and self._rng.random() < rate

    def latency_s(self) -> float:
        latency = self._config.latency
        if latency.dist == "fixed":
            ms = latency.ms
        elif latency.dist == "uniform":
            ms = self._rng.uniform(latency.min_ms, latency.max_ms)
        elif latency.dist == "normal":
            ms = max(0.0, self._rng.gauss(latency.mean_ms, latency.stddev_ms))
            if latency.max_ms > 0:
                ms = min(ms, latency.max_ms)
        else:
            return 0.0
        return ms / 1000.0

    async def before_request(self, *, submit: bool) -> None:
        """Latency, then 429, then 5xx, for a request in scope. Raises the fault to answer."""
        config = self._config
        if config.scope == "submit" and not submit:
            return
        delay = self.latency_s()
        if delay > 0:
            self.injected["latency"] += 1
            await asyncio.sleep(delay)
        if self._fires("rate_limit_next", config.rate_limit_rate):
            self.injected["rate_limited"] += 1
            log.info("stub.fault.rate_limited", extra={"after_s": config.rate_limit_after_s})
            raise RateLimitedFault(config.rate_limit_after_s)
        if self._fires("error_next", config.error_rate):
            self.injected["server_error"] += 1
            log.info("stub.fault.server_error", extra={"status": config.error_status})
            raise ServerErrorFault(config.error_status)

    def rejects(self, to: str | None) -> bool:
        if to is not None and to.lower() in self._config.reject_to:
            self.injected["rejected"] += 1
            return True
        return False

    def hang_s(self, to: str | None) -> float | None:
        """Seconds to hold an accepted send before answering, or None to answer at once."""
        config = self._config
        targeted = to is not None and to.lower() in config.hang_to
        if targeted or self._fires("hang_next", config.hang_rate):
            self.injected["hung"] += 1
            return config.hang_s
        return None

    def drops_broadcast(self) -> bool:
        """Chain mode: this broadcast is lost before it reaches the node."""
        if self._fires("broadcast_drop_next", 0.0):
            self.injected["broadcast_dropped"] += 1
            return True
        return False

    def rejects_broadcast(self) -> bool:
        """Chain mode: the node refuses this broadcast."""
        if self._fires("broadcast_reject_next", 0.0):
            self.injected["broadcast_rejected"] += 1
            return True
        return False
