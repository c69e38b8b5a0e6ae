"""Who is calling: X-API-Key → client, with a short in-process cache of verified keys."""

from __future__ import annotations

import asyncio
import contextvars
import hmac
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from relay_api.auth import repository
from relay_api.limits.service import Limit
from relay_core import apikeys, policy
from relay_core.audit import Actor
from relay_core.db.models import ApiClient
from relay_core.errors import Forbidden, Unauthorized
from relay_core.policy import NO_POLICY, SpendPolicy

log = logging.getLogger(__name__)

# The roles of a key: a client submits transactions (within its spend policy); an operator
# watches and steers (the dashboard, the queues' switch, dead letters listed and redriven,
# every client and transaction read); an admin does all an operator does and manages keys,
# policies and purges. Admin and operator keys manage; they do not submit.
ADMIN = "admin"
OPERATOR = "operator"
CLIENT = "client"
ROLES = (CLIENT, OPERATOR, ADMIN)
MISSING_KEY = "missing X-API-Key header"


@dataclass(frozen=True, slots=True)
class Caller:
    id: str
    name: str
    role: str
    callback_url: str | None = None
    limit: Limit | None = None  # its own rate limit; None: the deployment's default
    policy: SpendPolicy = NO_POLICY

    @property
    def is_admin(self) -> bool:
        return self.role == ADMIN

    @property
    def manages(self) -> bool:
        """An admin or an operator: reads everything, submits nothing."""
        return self.role in (ADMIN, OPERATOR)

    def actor(self) -> Actor:
        return Actor(self.id, self.name, self.role)

    def ensure_submits(self) -> None:
        """Admin and operator keys manage; only a client's key submits transactions."""
        if self.manages:
            raise Forbidden(
                f"an {self.role} key manages and does not submit transactions: use a "
                "client's key (relay keys create --name NAME, with its spend policy)"
            )


class Authenticator:
    """Verifies keys against the stored SHA-256 digests.

    A verified key is trusted for ``ttl_s`` seconds without a database read, so revoking a
    key takes effect within that time (0 disables the cache). A key in use is verified again
    in the background during the last fifth of its time, so a busy client's requests do not
    wait for that read; if the key was revoked meanwhile, the entry is dropped at once.
    """

    def forget(self, client_id: str) -> None:
        """Drop cached identities of a client whose settings changed."""
        for digest, (caller, _) in list(self._verified.items()):
            if caller.id == client_id:
                self._verified.pop(digest, None)

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
        *,
        unknown_ttl_s: float = 30.0,
    ) -> None:
        self._sessions = sessions
        self._ttl_s = ttl_s
        self._clock = clock
        self._verified: dict[str, tuple[Caller, float]] = {}
        self._lookups: dict[str, asyncio.Future[Caller]] = {}
        # Keys found unknown, answered 401 from memory for a while: a bogus key costs a
        # hash, not a database read each time.
        self._unknown_ttl_s = unknown_ttl_s
        self._unknown: dict[str, float] = {}
        self.lookups = 0  # database reads (tests and the curious)

    def known(self, presented: str | None) -> Caller | None:
        """The caller, if ``presented`` is a key verified in this process and not due again
        (from memory, no database read)."""
        if not presented or len(presented) > 200:
            return None
        digest = apikeys.hash_key(presented)
        cached = self._verified.get(digest)
        now = self._clock()
        if cached is None or cached[1] <= now:
            return None
        if cached[1] - now < self._ttl_s / 5:
            self._start_lookup(digest, background=True)
        return cached[0]

    async def authenticate(self, presented: str | None) -> Caller:
        known = self.known(presented)
        if known is not None:
            return known
        if not presented:
            raise Unauthorized(MISSING_KEY)
        if len(presented) > 200:
            raise Unauthorized("invalid API key")
        digest = apikeys.hash_key(presented)
        if self._unknown.get(digest, 0.0) > self._clock():
            raise Unauthorized("invalid API key")
        # shield: a request that gives up does not cancel the read the others wait for
        return await asyncio.shield(self._start_lookup(digest))

    def _start_lookup(self, digest: str, *, background: bool = False) -> asyncio.Future[Caller]:
        """One database read per key however many requests want it (an expiring entry would
        otherwise send every request in flight to the database at once)."""
        lookup = self._lookups.get(digest)
        if lookup is None:
            # Its own context: a background refresh belongs to no request.
            lookup = asyncio.get_running_loop().create_task(
                self._lookup(digest), context=contextvars.Context() if background else None
            )
            self._lookups[digest] = lookup
            lookup.add_done_callback(lambda done: self._lookup_done(digest, done))
        return lookup

    def _lookup_done(self, digest: str, lookup: asyncio.Future[Caller]) -> None:
        self._lookups.pop(digest, None)
        if not lookup.cancelled() and lookup.exception() is not None:
            # Retrieved here so an unawaited background refresh is not reported as lost; an
            # unreachable database leaves the entry to expire on its own.
            log.debug("auth.lookup_failed", extra={"error": str(lookup.exception())})

    async def _lookup(self, digest: str) -> Caller:
        self.lookups += 1
        async with self._sessions() as session:
            client = await repository.active_by_hash(session, digest)
        # The index lookup finds the row; the constant-time comparison is the check.
        if client is None or not hmac.compare_digest(client.key_hash, digest):
            self._verified.pop(digest, None)
            if self._unknown_ttl_s > 0:
                if len(self._unknown) > 100_000:
                    self._unknown.clear()
                self._unknown[digest] = self._clock() + self._unknown_ttl_s
            raise Unauthorized("invalid API key")
        self._unknown.pop(digest, None)
        limit = None
        if client.rate_limit_per_s is not None and client.rate_limit_burst is not None:
            try:
                limit = Limit(client.rate_limit_per_s, client.rate_limit_burst)
            except ValueError:
                # A row written around the API (by hand, or before its bounds were checked):
                # the client keeps working under the deployment's default.
                log.warning("auth.bad_rate_limit", extra={"client": client.id})
        caller = Caller(
            id=client.id,
            name=client.name,
            role=client.role,
            callback_url=client.callback_url,
            limit=limit,
            policy=SpendPolicy.of(client),
        )
        if self._ttl_s > 0:
            if len(self._verified) > 10_000:
                self._verified.clear()
            self._verified[digest] = (caller, self._clock() + self._ttl_s)
        return caller


async def create_client(
    session: AsyncSession, name: str, *, role: str = CLIENT, key: str | None = None
) -> tuple[ApiClient, str]:
    """Create a client and return it with its key (the only time the key is visible). A
    client's key may submit nothing until it is granted a spend policy (relay_core.policy)."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}")
    key = key or apikeys.generate_key()
    client = ApiClient(
        name=name,
        role=role,
        key_hash=apikeys.hash_key(key),
        key_prefix=apikeys.display_prefix(key),
        # Every client can receive callbacks (a transaction may name a callbackUrl), so every
        # client has a secret to sign them with, from the start.
        callback_secret=apikeys.generate_callback_secret(),
    )
    await repository.add(session, client)
    return client, key


# What the development key of `make run` may spend (any destination): small sums, said in
# the banner. An operator's own change to it is kept.
DEV_POLICY = {"maxValueWei": 10**18, "dailyValueWei": 100 * 10**18}


async def ensure_client_with_key(session: AsyncSession, name: str, key: str) -> ApiClient:
    """Seed a development client with a known key, granted :data:`DEV_POLICY`; reuse it
    (and the policy it has) when it already exists."""
    client = await repository.by_hash(session, apikeys.hash_key(key))
    if client is not None:
        client.revoked_at = None
    else:
        client, _ = await create_client(session, name, key=key)
    if client.policy_granted_at is None:
        policy.apply(client, DEV_POLICY, granted_by="the development policy of make run")
    return client
