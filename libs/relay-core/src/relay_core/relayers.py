"""The relayer pool: every relayer account Relay sends through, and a client for each.

A relayer is one account of the executor (its own address, balance and nonce counter), named
by its id; one executor instance serves many, and a pool may span several instances. Each
member is an (executor URL, relayer id, key) triple; ``RELAY_EXECUTOR_RELAYERS`` lists them:

* a JSON list of objects, ``[{"id": "relayer-2", "url": "https://…", "apiKey": "…",
  "minBalanceWei": "50000000000000000"}, …]``, every field but ``id`` optional (the URL and
  key default to ``RELAY_EXECUTOR_URL`` and ``RELAY_EXECUTOR_API_KEY``, the balance floor to
  ``RELAY_RELAYER_MIN_BALANCE_WEI``), as one secret of Secrets Manager holds it;
* or relayer ids separated by commas, all on ``RELAY_EXECUTOR_URL``;
* or nothing: the pool is ``RELAY_EXECUTOR_RELAYER_ID`` alone, as before pools.

A transaction records the relayer it was sent to (``transactions.relayer``); every later
question about it (the in-doubt lookup, the tracker, the status tier, a cancel) goes to that
relayer. A row without one was sent before pools, to ``RELAY_EXECUTOR_RELAYER_ID``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from relay_core.executor import ExecutorClient

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")


@dataclass(frozen=True, slots=True)
class RelayerSpec:
    id: str
    url: str
    api_key: str
    min_balance_wei: int

    def __repr__(self) -> str:  # never the key
        return f"RelayerSpec(id={self.id!r}, url={self.url!r})"


def parse_specs(
    raw: str, *, url: str, api_key: str, default_id: str, min_balance_wei: int
) -> list[RelayerSpec]:
    """The pool ``raw`` (``RELAY_EXECUTOR_RELAYERS``) names; ValueError says what is wrong."""
    text = raw.strip()
    if not text:
        return [RelayerSpec(default_id, url, api_key, min_balance_wei)]
    items: list[Any]
    if text.startswith("["):
        try:
            items = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"RELAY_EXECUTOR_RELAYERS is not valid JSON: {exc}") from None
    else:
        items = [{"id": part.strip()} for part in text.split(",") if part.strip()]
    specs = []
    for index, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            raise ValueError(f'RELAY_EXECUTOR_RELAYERS[{index}] needs an "id" (a string)')
        unknown = set(item) - {"id", "url", "apiKey", "minBalanceWei"}
        if unknown:
            raise ValueError(
                f"RELAY_EXECUTOR_RELAYERS[{index}]: unknown field(s) {', '.join(sorted(unknown))}"
                " (id, url, apiKey, minBalanceWei)"
            )
        if not _ID.fullmatch(item["id"]):
            raise ValueError(
                f"RELAY_EXECUTOR_RELAYERS[{index}]: {item['id']!r} is not a relayer id "
                "(letters, digits and ._:- , at most 64)"
            )
        try:
            floor = int(item.get("minBalanceWei", min_balance_wei))
        except (TypeError, ValueError):
            raise ValueError(
                f"RELAY_EXECUTOR_RELAYERS[{index}].minBalanceWei must be an integer (wei)"
            ) from None
        if floor < 0:
            raise ValueError(f"RELAY_EXECUTOR_RELAYERS[{index}].minBalanceWei must be >= 0")
        specs.append(
            RelayerSpec(
                item["id"], str(item.get("url") or url), str(item.get("apiKey") or api_key), floor
            )
        )
    if not specs:
        raise ValueError("RELAY_EXECUTOR_RELAYERS names no relayer")
    ids = [spec.id for spec in specs]
    if len(set(ids)) != len(ids):
        raise ValueError("RELAY_EXECUTOR_RELAYERS names a relayer twice")
    return specs


class ExecutorPool:
    """One executor client per relayer of the pool; ``of(row.relayer)`` is the one to ask
    about a transaction. Built at start-up, closed at shutdown."""

    def __init__(
        self,
        specs: list[RelayerSpec],
        default_id: str,
        *,
        timeout_s: float = 10.0,
        max_connections: int = 100,
    ) -> None:
        self.specs = {spec.id: spec for spec in specs}
        self.clients = {
            spec.id: ExecutorClient(
                spec.url,
                spec.api_key,
                spec.id,
                timeout_s=timeout_s,
                max_connections=max_connections,
            )
            for spec in specs
        }
        # A row without a relayer was sent before pools, to the single relayer of the time.
        self.default = default_id if default_id in self.clients else specs[0].id

    @classmethod
    def configured(
        cls, settings: Any, *, timeout_s: float, max_connections: int = 100
    ) -> ExecutorPool:
        return cls(
            settings.relayer_specs(),
            settings.executor_relayer_id,
            timeout_s=timeout_s,
            max_connections=max_connections,
        )

    def name_of(self, relayer: str | None) -> str:
        """The relayer a row names (its own, else the default)."""
        return relayer if relayer else self.default

    def of(self, relayer: str | None) -> ExecutorClient:
        """The client of the relayer a row names. A relayer no longer in the pool (taken out
        while it still held transactions) is still asked through the default relayer's
        instance: the executor looks a transaction up by id alone."""
        name = self.name_of(relayer)
        client = self.clients.get(name)
        if client is None:
            spec = self.specs[self.default]
            client = self.clients[name] = ExecutorClient(spec.url, spec.api_key, name)
        return client

    def __iter__(self) -> Iterator[str]:
        return iter(self.specs)

    async def aclose(self) -> None:
        for client in self.clients.values():
            await client.aclose()
