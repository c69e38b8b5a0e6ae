"""Synthetic transaction history with the exact shape the API and consumer write.

A transaction row is created ``pending`` (creation is not an event); every later status change
appends one ``transaction_events`` row. Rows are produced in ``created_at`` order with
time-ordered (version 7) UUIDs, so a bulk load appends to every index instead of splitting pages
all over them; the pipeline itself assumes nothing about id order.

Output is tab-separated text (``\\N`` for NULL), the format ``LOAD DATA`` reads; the SQLite loader
parses the same lines. Generation is deterministic for a given seed and chunking.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import date

US = 1_000_000
DAY_US = 86_400 * US

TX_COLUMNS = (
    "id",
    "client_id",
    "type",
    "status",
    "version",
    "request",
    "result",
    "error",
    "hash",
    "executor_tx_id",
    "attempts",
    "idempotency_key",
    "request_fingerprint",
    "inflight_key",
    "valid_until",
    "enqueued_at",
    "claimed_by",
    "claimed_at",
    "submit_started_at",
    "created_at",
    "updated_at",
    "submitted_at",
    "confirmed_at",
    "relayer",
    "block_number",
    "gas_used",
    "effective_gas_price",
    "fee_wei",
    "fee_settled_at",
)
EVENT_COLUMNS = ("transaction_id", "from_status", "to_status", "source", "reason", "created_at")

SPEEDS = (("safeLow", 0.10), ("average", 0.45), ("fast", 0.35), ("fastest", 0.10))
# Median seconds from submission to inclusion, by requested speed (gasless: the forwarder's).
MINE_MEDIAN_S = {"safeLow": 60.0, "average": 24.0, "fast": 12.0, "fastest": 6.0, None: 15.0}
CONFIRM_BLOCKS_S = 12 * 12.0

PERMANENT_REASONS = (
    ("executor 400: insufficient funds for gas * price + value", 5),
    ("executor 400: nonce too low", 2),
    ("executor 400: gas limit below intrinsic gas", 1),
)
TRANSIENT_REASONS = (
    ("executor 503: service unavailable", 3),
    ("executor timeout after 10s", 2),
    ("executor 429: rate limited", 1),
)
REVERT_REASON = "reverted on chain: execution reverted"

# What a transaction on chain cost. Blocks every 12 s since the Merge (mainnet's numbers).
MERGE_BLOCK, MERGE_S, BLOCK_S = 15_537_394, 1_663_224_179, 12
RELAYERS = ("relayer-1", "relayer-2", "relayer-3")
# Price per gas: a base fee that swings ±40 % over the day (busiest at 15:00 UTC), times what the
# requested speed pays over it (fastest twice safeLow; gasless: the forwarder's, average).
BASE_FEE_WEI = 20 * 10**9
PRICE_FACTOR = {"safeLow": 1.0, "average": 1.25, "fast": 1.5, "fastest": 2.0, None: 1.25}
# A client's fee spike: in an hour of its chosen by the anomaly rate, it pays 10× the price.
SPIKE_PRICE = 10.0
SPIKE_MODULUS = 10_007


@dataclass(frozen=True)
class SeedPlan:
    """What to generate: ``rows`` transactions created uniformly over ``[start_us, end_us)``."""

    rows: int
    start_us: int
    end_us: int
    client_ids: tuple[str, ...]
    seed: int = 1
    anomaly_rate: float = 0.0005

    @property
    def span_us(self) -> int:
        return self.end_us - self.start_us


def _weighted(pairs: tuple[tuple[str, int], ...]) -> list[str]:
    return [value for value, weight in pairs for _ in range(weight)]


class Clock:
    """Formats epoch microseconds as naive-UTC DATETIME(6) text, quickly."""

    def __init__(self) -> None:
        self._days: dict[int, str] = {}
        self._epoch = date(1970, 1, 1).toordinal()

    def __call__(self, us: int) -> str:
        day, rem = divmod(us, DAY_US)
        text = self._days.get(day)
        if text is None:
            text = date.fromordinal(self._epoch + day).isoformat()
            self._days[day] = text
        secs, frac = divmod(rem, US)
        hours, secs = divmod(secs, 3600)
        minutes, secs = divmod(secs, 60)
        return f"{text} {hours:02d}:{minutes:02d}:{secs:02d}.{frac:06d}"


def uuid7(ms: int, rng: random.Random) -> str:
    rand = rng.getrandbits(74)
    return (
        f"{ms >> 16:08x}-{ms & 0xFFFF:04x}-7{(rand >> 62) & 0xFFF:03x}-"
        f"{0x8000 | ((rand >> 48) & 0x3FFF):04x}-{rand & 0xFFFFFFFFFFFF:012x}"
    )


def generate_chunk(plan: SeedPlan, first: int, count: int) -> tuple[list[str], list[str]]:
    """Transactions ``first .. first+count-1`` of the plan as TSV lines (rows, events)."""
    rng = random.Random(plan.seed * 1_000_003 + first)
    clock = Clock()
    nul = "\\N"
    tx_lines: list[str] = []
    ev_lines: list[str] = []
    clients = plan.client_ids
    # Zipf-like: a few clients send most of the traffic.
    client_weights = [1.0 / (k + 1) for k in range(len(clients))]
    client_cum = _cumulative(client_weights)
    speed_names = [name for name, _ in SPEEDS]
    speed_cum = _cumulative([w for _, w in SPEEDS])
    permanent = _weighted(PERMANENT_REASONS)
    transient = _weighted(TRANSIENT_REASONS)
    targets = [f"0x{rng.getrandbits(160):040x}" for _ in range(64)]
    calldata = ["0x", "0xa9059cbb" + "00" * 64, "0x095ea7b3" + "11" * 64, "0xd0e30db0"]
    signatures = [f"0x{rng.getrandbits(520):0130x}" for _ in range(16)]
    step = plan.span_us / plan.rows
    end = plan.end_us
    lognorm = rng.lognormvariate
    rand = rng.random
    getbits = rng.getrandbits
    # About 4 × anomaly_rate of each client's hours are spike hours (none without anomalies).
    spike_below = int(plan.anomaly_rate * 4 * SPIKE_MODULUS)
    day_phase = 2 * math.pi / (24 * 3600 * US)
    sin = math.sin

    for i in range(first, first + count):
        created = plan.start_us + int((i + rand()) * step)
        tx_id = uuid7(created // 1000, rng)
        client_index = _pick(client_cum, rand())
        client = clients[client_index]
        gasless = rand() < 0.2
        speed = None if gasless else speed_names[_pick(speed_cum, rand())]
        to = targets[i & 63]
        if gasless:
            sender = targets[(i * 7 + 3) & 63]
            request = (
                f'{{"request":{{"from":"{sender}","to":"{to}","value":"0","gas":"120000",'
                f'"nonce":"{i}","deadline":"{created // US + 3600}","data":"{calldata[i & 3]}"}},'
                f'"signature":"{signatures[i & 15]}"}}'
            )
            inflight: str | None = f"{sender}:{i}"
            valid_until: int | None = created + 3600 * US
        else:
            request = (
                f'{{"to":"{to}","data":"{calldata[i & 3]}","value":"{(i & 7) * 10**15}",'
                f'"gasLimit":"{21000 if i & 3 == 0 else 90000}","speed":"{speed}"}}'
            )
            inflight = None
            valid_until = created + 1800 * US if i & 1 else None

        # --- lifecycle: (time_us, from, to, source, reason) ----------------------------
        events: list[tuple[int, str, str, str, str | None]] = []
        handed_over = created + 2_000 + int(rand() * 40_000)
        enqueued: int | None = handed_over
        claimed_at = submit_started = submitted = confirmed = mined_at = None
        error: str | None = None
        attempts = 0
        u = rand()
        anomaly = rand() < plan.anomaly_rate
        kind = int(rand() * 4) if anomaly else -1
        t = handed_over
        if kind == 0:  # accepted, never enqueued: the send was lost and the sweeper is down
            enqueued = None
        else:
            retries = 2 if u < 0.01 else (1 if u < 0.09 else 0)
            if 0.91 <= u < 0.92:
                retries = 3  # retries exhausted → failed, dead-lettered
            state = "pending"
            for attempt in range(retries + 1):
                t += int(lognorm(math.log(120_000), 0.8)) + (attempt and int(2e6 + rand() * 6e6))
                events.append((t, state, "processing", "consumer", None))
                state = "processing"
                attempts += 1
                claimed_at = t
                if attempt < retries:
                    reason = transient[int(rand() * len(transient))]
                    if attempt == 2:
                        error = f"retries exhausted: {reason}"
                        events.append((t + 10_000, state, "failed", "consumer.dlq", error))
                        state = "failed"
                        break
                    events.append((t + 10_000, state, "pending", "consumer", reason))
                    t += 10_000
                    state = "pending"
            if state == "processing" and kind != 1:
                submit_started = t + 1_000
                if 0.92 <= u < 0.95:  # permanent executor error: failed at once, to the DLQ
                    error = permanent[int(rand() * len(permanent))]
                    t += int(lognorm(math.log(150_000), 0.4))
                    events.append((t, state, "failed", "consumer.dlq", error))
                elif 0.95 <= u < 0.97:  # valid-until passed before submission
                    error = "valid_until passed before submission"
                    t += 2_000
                    events.append((t, state, "expired", "consumer", error))
                else:
                    t += int(lognorm(math.log(350_000), 0.5))
                    submitted = t
                    events.append((t, state, "submitted", "consumer", None))
                    if kind != 2:
                        mined_median = MINE_MEDIAN_S[speed] * US
                        t_mined = t + int(lognorm(math.log(mined_median), 0.6))
                        if 0.97 <= u < 0.985:
                            error = REVERT_REASON
                            events.append((t_mined, "submitted", "failed", "tracker", error))
                            mined_at = t_mined  # reverted in a block: it paid for its gas
                        elif 0.985 <= u < 0.99:
                            error = "executor: transaction expired"
                            events.append((t_mined, "submitted", "expired", "webhook", error))
                        elif 0.99 <= u < 0.995:
                            events.append((t_mined, "submitted", "canceled", "webhook", "canceled"))
                        else:
                            events.append((t_mined, "submitted", "mined", "webhook", None))
                            mined_at = t_mined
                            t_conf = t_mined + int(CONFIRM_BLOCKS_S * US + (rand() - 0.5) * 2e7)
                            events.append((t_conf, "mined", "confirmed", "webhook", None))
                            confirmed = t_conf

        # --- cut at the end of history: later changes have not happened yet ----------
        if events and events[-1][0] >= end:
            events = [e for e in events if e[0] < end]
            if submitted is not None and submitted >= end:
                submitted = None
            if submit_started is not None and submit_started >= end:
                submit_started = None
            if confirmed is not None and confirmed >= end:
                confirmed = None
            if mined_at is not None and mined_at >= end:
                mined_at = None
            if claimed_at is not None and claimed_at >= end:
                claimed_at = max((e[0] for e in events if e[2] == "processing"), default=None)
                attempts = sum(1 for e in events if e[2] == "processing")
            error = next((e[4] for e in reversed(events) if e[2] in _ERROR_STATES), None)
        if enqueued is not None and enqueued >= end:
            enqueued = None
        status = events[-1][2] if events else "pending"
        updated = events[-1][0] if events else created
        if kind == 3 and status == "confirmed":
            events.pop()  # trail lost its last event: the row says confirmed, the trail mined
        if status not in ("pending", "processing", "submitted", "mined"):
            inflight = None
        has_hash = submitted is not None
        tx_hash = f"0x{getbits(256):064x}" if has_hash else None
        executor_id = uuid7(submitted // 1000, rng) if submitted is not None else None
        result = f'{{"executorTxId":"{executor_id}","hash":"{tx_hash}"}}' if has_hash else None
        idem = f"{getbits(64):016x}" if i % 3 == 0 else None
        # The relayer is stamped when an attempt starts submitting; the cost is recorded from
        # the receipt a few seconds after its block (not yet, at the end of history).
        relayer = RELAYERS[int(rand() * len(RELAYERS))] if submit_started is not None else None
        cost = (nul, nul, nul, nul, nul)
        settled = mined_at + int(1e6 + rand() * 5e6) if mined_at is not None else end
        if mined_at is not None and settled < end:
            if gasless:
                gas = 60_000 + int(rand() * 140_000)
            else:
                gas = 21_000 if i & 3 == 0 else 30_000 + int(rand() * 60_000)
            day = 1.0 + 0.4 * sin((mined_at - 9 * 3600 * US) * day_phase)
            price = int(BASE_FEE_WEI * day * lognorm(0.0, 0.2) * PRICE_FACTOR[speed])
            # A tuple of ints hashes the same in every process (no hash randomisation).
            hour = created // (3600 * US)
            if hash((plan.seed, client_index, hour)) % SPIKE_MODULUS < spike_below:
                price = int(price * SPIKE_PRICE)
            block = MERGE_BLOCK + (mined_at // US - MERGE_S) // BLOCK_S
            cost = (str(block), str(gas), str(price), str(gas * price), clock(settled))
        tx_lines.append(
            "\t".join(
                (
                    tx_id,
                    client,
                    "gasless" if gasless else "direct",
                    status,
                    str(1 + len(events)),
                    request,
                    result or nul,
                    error or nul,
                    tx_hash or nul,
                    executor_id or nul,
                    str(attempts),
                    idem or nul,
                    f"{getbits(256):064x}",
                    inflight or nul,
                    clock(valid_until) if valid_until is not None else nul,
                    clock(enqueued) if enqueued is not None else nul,
                    f"consumer-{i % 4}" if claimed_at is not None else nul,
                    clock(claimed_at) if claimed_at is not None else nul,
                    clock(submit_started) if submit_started is not None else nul,
                    clock(created),
                    clock(updated),
                    clock(submitted) if submitted is not None else nul,
                    clock(confirmed) if confirmed is not None else nul,
                    relayer or nul,
                    *cost,
                )
            )
        )
        for at, before, after, source, why in events:
            ev_lines.append(f"{tx_id}\t{before}\t{after}\t{source}\t{why or nul}\t{clock(at)}")
    return tx_lines, ev_lines


_ERROR_STATES = frozenset({"failed", "expired"})


def _cumulative(weights: list[float]) -> list[float]:
    total = sum(weights)
    acc, out = 0.0, []
    for w in weights:
        acc += w / total
        out.append(acc)
    out[-1] = 1.0
    return out


def _pick(cumulative: list[float], u: float) -> int:
    for index, bound in enumerate(cumulative):
        if u < bound:
            return index
    return len(cumulative) - 1
