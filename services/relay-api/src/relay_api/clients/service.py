"""A client's settings as an operator reads and changes them: the same view and the same
rules for ``relay clients show|policy`` and the admin endpoints."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from relay_api.clients import repository
from relay_api.settings import ApiSettings
from relay_core import audit, ethereum, fees, policy, spending
from relay_core.audit import Actor
from relay_core.db.models import ApiClient, utcnow
from relay_core.errors import BadRequest, NotFound
from relay_core.views import rfc3339

# The fields an operator may change (as the view names them).
RATE_FIELDS = ("rateLimitPerS", "rateLimitBurst")
POLICY_FIELDS = policy.FIELDS


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
    spent = await spending.spent_today(session, client.id, utcnow())
    fees_spent = await spending.spent_today(session, client.id, utcnow(), kind=spending.FEE)
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
        "policy": {
            **spend.view(),
            "grantedAt": rfc3339(client.policy_granted_at),
            "grantedBy": client.policy_granted_by,
        },
        "spentLast24hWei": str(spent),
        "feesLast24hWei": str(fees_spent),
    }


def settings_of(client: ApiClient) -> dict[str, Any]:
    """What an audit entry keeps of a client before and after a change."""
    return {
        "policy": policy.SpendPolicy.of(client).view(),
        "rateLimit": None
        if client.rate_limit_per_s is None
        else {"perSecond": client.rate_limit_per_s, "burst": client.rate_limit_burst},
        "revoked": client.revoked_at is not None,
    }


def change(
    session: AsyncSession,
    client: ApiClient,
    changes: dict[str, Any],
    settings: ApiSettings,
    actor: Actor,
) -> None:
    """Apply ``changes`` (view names; None clears a limit) after checking every value, so a
    bad one changes nothing (400 naming the field otherwise), and record who did it. Any
    policy field grants the client its policy if it had none."""
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
    for field in ("maxValueWei", "dailyValueWei", "maxFeeWei", "dailyFeeWei"):
        if field in changes:
            checked[field] = _wei(field, changes[field])
    if "speeds" in changes:
        speeds = changes["speeds"] or []
        if not isinstance(speeds, list) or any(s not in fees.SPEEDS for s in speeds):
            raise BadRequest(f"speeds: a list of {', '.join(fees.SPEEDS)} (empty: any)")
        checked["speeds"] = speeds
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
    before = settings_of(client)
    if rate:
        client.rate_limit_per_s = None if per_s is None else float(per_s)
        client.rate_limit_burst = burst
    if any(field in changes for field in POLICY_FIELDS):
        policy.apply(client, checked, granted_by=f"{actor.name} ({actor.role})")
    audit.record(
        session,
        actor,
        "client.change",
        "client",
        target_id=client.id,
        target_name=client.name,
        before=before,
        after=settings_of(client),
    )


def _wei(field: str, value: Any) -> int | None:
    if value is None:
        return None
    try:
        return ethereum.parse_uint(value if isinstance(value, str) else str(value))
    except (ValueError, TypeError) as exc:
        raise BadRequest(f"{field}: must be wei as a decimal string (0 to 2^256-1)") from exc
