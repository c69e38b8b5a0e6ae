"""A client's settings as an operator reads and changes them: the same view and the same
rules for ``relay clients show|policy`` and the admin endpoints."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from relay_api.clients import repository
from relay_api.settings import ApiSettings
from relay_core import ethereum, policy
from relay_core.db.models import ApiClient, utcnow
from relay_core.errors import BadRequest, NotFound

# The fields an operator may change (as the view names them).
RATE_FIELDS = ("rateLimitPerS", "rateLimitBurst")
POLICY_FIELDS = ("allowedTo", "maxValueWei", "dailyValueWei", "maxGas", "gaslessValue")


async def find(session: AsyncSession, ref: str) -> ApiClient:
    """The client with this id, or the only one with this name."""
    found = await repository.by_id_or_name(session, ref)
    if len(found) != 1:
        what = "no client" if not found else f"{len(found)} clients"
        raise NotFound(f"{what} named or numbered {ref!r}; use the id (relay keys list)")
    return found[0]


async def view(session: AsyncSession, client: ApiClient, settings: ApiSettings) -> dict[str, Any]:
    own_rate = client.rate_limit_per_s is not None
    spend = policy.SpendPolicy.of(client)
    spent = await policy.spent_today(session, client.id, utcnow())
    return {
        "id": client.id,
        "name": client.name,
        "role": client.role,
        "keyPrefix": client.key_prefix,
        "revoked": client.revoked_at is not None,
        "callbackUrl": client.callback_url,
        "rateLimit": {
            "perSecond": client.rate_limit_per_s if own_rate else settings.rate_limit_per_s,
            "burst": client.rate_limit_burst if own_rate else settings.rate_limit_burst,
            "own": own_rate,
        },
        "policy": spend.view(),
        "spentLast24hWei": str(spent),
    }


def change(client: ApiClient, changes: dict[str, Any], settings: ApiSettings) -> None:
    """Apply ``changes`` (view names; None clears a limit) after checking every value, so a
    bad one changes nothing. 400 naming the field otherwise."""
    unknown = set(changes) - set(RATE_FIELDS) - set(POLICY_FIELDS)
    if unknown:
        raise BadRequest(f"{sorted(unknown)[0]}: not a setting of a client")
    checked: dict[str, Any] = {}
    if "allowedTo" in changes:
        addresses = changes["allowedTo"] or []
        if not isinstance(addresses, list):
            raise BadRequest("allowedTo: must be a list of addresses (empty: any)")
        try:
            checked["allowedTo"] = [ethereum.check_address(str(a)) for a in addresses]
        except ValueError as exc:
            raise BadRequest(f"allowedTo: {exc}") from exc
    for field in ("maxValueWei", "dailyValueWei"):
        if field in changes:
            checked[field] = _wei(field, changes[field])
    if "maxGas" in changes and changes["maxGas"] is not None:
        gas = changes["maxGas"]
        if not isinstance(gas, int) or isinstance(gas, bool):
            raise BadRequest("maxGas: must be an integer")
        if gas < 21000 or gas > settings.max_gas_limit:
            raise BadRequest(f"maxGas: must be between 21000 and {settings.max_gas_limit}")
        checked["maxGas"] = gas
    elif "maxGas" in changes:
        checked["maxGas"] = None
    if "gaslessValue" in changes:
        if not isinstance(changes["gaslessValue"], bool):
            raise BadRequest("gaslessValue: must be true or false")
        checked["gaslessValue"] = changes["gaslessValue"]
    rate = {k: changes[k] for k in RATE_FIELDS if k in changes}
    if rate:
        per_s, burst = rate.get("rateLimitPerS"), rate.get("rateLimitBurst")
        if (per_s is None) != (burst is None) or len(rate) != 2:
            raise BadRequest("rateLimitPerS: goes with rateLimitBurst (both null: the default)")
        if per_s is not None and not (
            isinstance(per_s, int | float) and per_s > 0 and isinstance(burst, int) and burst >= 1
        ):
            raise BadRequest("rateLimitPerS: must be above 0, and rateLimitBurst at least 1")
        client.rate_limit_per_s = None if per_s is None else float(per_s)
        client.rate_limit_burst = burst
    policy.apply(client, checked)


def _wei(field: str, value: Any) -> int | None:
    if value is None:
        return None
    try:
        return ethereum.parse_uint(value if isinstance(value, str) else str(value))
    except (ValueError, TypeError) as exc:
        raise BadRequest(f"{field}: must be wei as a decimal string (0 to 2^256-1)") from exc
