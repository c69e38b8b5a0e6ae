"""Helpers for relay-api tests (importable: the tests folder is on pytest's pythonpath)."""

from __future__ import annotations

from typing import Any

TEST_FORWARDER = "0x5FbDB2315678afecb367f032d93F642f64180aa3"  # not deployed anywhere
DEAD = "0x000000000000000000000000000000000000dEaD"


async def receive_all(sqs: Any, queue_url: str, *, wait_s: int = 1, rounds: int = 3) -> list[Any]:
    """Drain visible messages (without deleting) until ``rounds`` empty polls in a row."""
    messages: list[Any] = []
    empty = 0
    while empty < rounds:
        response = await sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=wait_s,
            VisibilityTimeout=300,
            MessageAttributeNames=["All"],
            AttributeNames=["All"],
        )
        batch = response.get("Messages", [])
        if batch:
            messages.extend(batch)
            empty = 0
        else:
            empty += 1
    return messages


def signed_gasless(
    settings: Any,
    *,
    account: Any = None,
    signer: Any = None,
    nonce: int = 0,
    deadline_in_s: int = 3600,
    data: str = "0x",
    value: str = "0",
    gas: str = "100000",
    domain: Any = None,
) -> dict[str, Any]:
    """A gasless body signed as a wallet would; ``signer`` signs on behalf of ``account``."""
    import time

    from eth_account import Account

    from relay_core import ethereum

    account = account or Account.create()
    signer = signer or account
    request = {
        "from": account.address,
        "to": DEAD,
        "value": value,
        "gas": gas,
        "nonce": str(nonce),
        "deadline": int(time.time()) + deadline_in_s,
        "data": data,
    }
    forward = ethereum.ForwardRequest(
        sender=account.address,
        to=DEAD,
        value=int(value),
        gas=int(gas),
        nonce=nonce,
        deadline=request["deadline"],
        data=data,
    )
    signature = ethereum.sign_forward_request(
        domain or settings.forwarder_domain, forward, signer.key
    )
    return {"request": request, "signature": signature}


async def count_rows(runtime: Any, table: str = "transactions") -> int:
    from sqlalchemy import text

    async with runtime.sessions() as session:
        return int((await session.execute(text(f"SELECT COUNT(*) FROM {table}"))).scalar_one())  # noqa: S608


async def accept_direct(client: Any, key: str, **fields: Any) -> str:
    """A direct transaction to DEAD accepted for ``key``'s client; its id."""
    response = await client.post(
        "/api/v1/relay/direct", json={"to": DEAD, **fields}, headers={"X-API-Key": key}
    )
    assert response.status_code == 202, response.text
    return str(response.json()["transactionId"])


async def row_of(runtime: Any, tx_id: str) -> Any:
    """The transaction's row as it is now (detached)."""
    from relay_core.db.models import Transaction

    async with runtime.sessions() as session:
        tx = await session.get(Transaction, tx_id)
        assert tx is not None
        return tx


async def set_row(runtime: Any, tx_id: str, **values: Any) -> None:
    """Put the row where a test needs it (a new version, as any write makes)."""
    from sqlalchemy import update

    from relay_core.db.models import Transaction

    async with runtime.sessions() as session, session.begin():
        await session.execute(
            update(Transaction)
            .where(Transaction.id == tx_id)
            .values(version=Transaction.version + 1, **values)
        )
