"""The client's operations without a network: what each sends, how it retries and waits, and
which exception a refusal becomes. (Against the real API: tests/client.)"""

from __future__ import annotations

from typing import Any

import pytest

from relay_client import errors, flows
from relay_client.flows import Call, Flow, Reply, Sleep

STATUS = {
    "transactionId": "t-1",
    "type": "direct",
    "status": "pending",
    "hash": None,
    "errorMessage": None,
    "createdAt": "2026-11-25T00:00:00.000Z",
    "updatedAt": "2026-11-25T00:00:00.000Z",
    "submittedAt": None,
    "confirmedAt": None,
}


def _drive(flow: Flow[Any], replies: list[Reply]) -> tuple[Any, list[Call], list[float]]:
    """Run ``flow`` answering its calls from ``replies`` in turn; returns its result, the
    calls it made and the sleeps it asked for."""
    calls: list[Call] = []
    sleeps: list[float] = []
    answer: Reply | None = None
    while True:
        try:
            step = flow.send(answer)
        except StopIteration as done:
            return done.value, calls, sleeps
        if isinstance(step, Sleep):
            sleeps.append(step.seconds)
            answer = None
        else:
            calls.append(step)
            answer = replies.pop(0)


def _reply(status: int, body: Any = None, **headers: str) -> Reply:
    return Reply(status, {k.replace("_", "-"): v for k, v in headers.items()}, body)


def _accepted(**headers: str) -> Reply:
    body = {"transactionId": "t-1", "status": "pending", "createdAt": STATUS["createdAt"]}
    return _reply(202, body, **headers)


def test_a_direct_submission_sends_decimal_strings_and_an_idempotency_key() -> None:
    flow = flows.submit_direct(
        "0xdead",
        data="0x",
        value=10**30,
        gas_limit=21_000,
        speed="fastest",
        valid_until=None,
        callback_url=None,
        idempotency_key=None,
        retries=0,
    )
    accepted, calls, _ = _drive(flow, [_accepted(location="/api/v1/relay/status/t-1")])
    (call,) = calls
    assert call.json == {
        "to": "0xdead",
        "data": "0x",
        "value": "1000000000000000000000000000000",
        "gasLimit": "21000",
        "speed": "fastest",
    }
    assert len(call.headers["Idempotency-Key"]) == 36
    assert accepted.idempotency_key == call.headers["Idempotency-Key"]
    assert accepted.location == "/api/v1/relay/status/t-1"
    assert not accepted.replayed


@pytest.mark.parametrize("value", [1.5, True, None])
def test_wei_is_never_a_float(value: Any) -> None:
    flow = flows.submit_direct(
        "0xdead",
        data="0x",
        value=value,
        gas_limit=None,
        speed=None,
        valid_until=None,
        callback_url=None,
        idempotency_key="k",
        retries=0,
    )
    with pytest.raises(TypeError, match="value must be an int or a decimal string"):
        _drive(flow, [])


def test_no_answer_429_and_503_are_retried_with_the_same_key_honouring_retry_after() -> None:
    flow = flows.submit_direct(
        "0xdead",
        data="0x",
        value=0,
        gas_limit=None,
        speed=None,
        valid_until=None,
        callback_url=None,
        idempotency_key="mine",
        retries=3,
    )
    replies = [
        _reply(0, "ConnectError"),
        _reply(429, {"error": "rate_limited", "detail": "slow down"}, retry_after="3"),
        _reply(503, {"error": "unavailable", "detail": "database"}),
        _accepted(idempotent_replayed="true"),
    ]
    accepted, calls, sleeps = _drive(flow, replies)
    assert [c.headers["Idempotency-Key"] for c in calls] == ["mine"] * 4
    assert sleeps == [0.5, 3.0, 2.0]  # back-off, then Retry-After, then back-off again
    assert accepted.replayed


def test_a_refusal_raises_its_class_with_the_apis_error_and_detail() -> None:
    body = {
        "error": "validation_error",
        "detail": "to: is required",
        "fields": [{"field": "to", "message": "is required"}],
    }
    with pytest.raises(errors.ValidationFailed) as raised:
        _drive(flows.status("t-1", retries=3), [_reply(422, body)])
    assert (raised.value.status, raised.value.error) == (422, "validation_error")
    assert raised.value.detail == "to: is required"
    assert raised.value.fields == [{"field": "to", "message": "is required"}]

    gone = [_reply(429, {"error": "rate_limited", "detail": "x"}, retry_after="7")] * 2
    with pytest.raises(errors.RateLimited) as limited:
        _drive(flows.status("t-1", retries=1), gone)
    assert limited.value.retry_after == 7.0

    with pytest.raises(errors.RelayError) as unreachable:
        _drive(flows.status("t-1", retries=0), [_reply(0, "ConnectError: refused")])
    assert unreachable.value.error == "connection_failed"

    with pytest.raises(errors.RelayError) as proxy:
        _drive(flows.status("t-1", retries=0), [_reply(418, "<html>teapot</html>")])
    assert (proxy.value.status, proxy.value.error) == (418, "http_error")


def test_wait_backs_off_until_final_and_times_out_with_the_last_status() -> None:
    now = [0.0]

    def clock() -> float:
        return now[0]

    def status(state: str) -> Reply:
        return _reply(200, {**STATUS, "status": state}, x_cache="hit")

    flow = flows.wait("t-1", timeout_s=60, poll_s=1, max_poll_s=2, retries=0, clock=clock)
    final, calls, sleeps = _drive(
        flow, [status("pending"), status("submitted"), status("mined"), status("confirmed")]
    )
    assert final.status == "confirmed"
    assert final.final
    assert final.source == "hit"
    assert sleeps == [1, 1.5, 2]
    assert [c.path for c in calls] == ["/api/v1/relay/status/t-1"] * 4

    flow = flows.wait("t-1", timeout_s=1, poll_s=5, max_poll_s=5, retries=0, clock=clock)
    first = flow.send(None)
    assert isinstance(first, Call)
    assert flow.send(status("pending")) == Sleep(1)  # never past the deadline
    now[0] = 2.0
    flow.send(None)
    with pytest.raises(errors.WaitTimeout, match="still pending after 1 s"):
        flow.send(status("pending"))


def test_a_page_carries_its_filters_and_cursor() -> None:
    body = {"items": [STATUS], "nextCursor": "abc"}
    page, calls, _ = _drive(flows.page("pending", "xyz", 10, retries=0), [_reply(200, body)])
    assert calls[0].params == {"limit": 10, "status": "pending", "cursor": "xyz"}
    assert page.next_cursor == "abc"
    assert [item.transaction_id for item in page.items] == ["t-1"]


def test_a_status_says_what_it_cost_and_one_from_an_older_server_is_read_too() -> None:
    cost = {
        "blockNumber": 16,
        "gasUsed": 21_000,
        "effectiveGasPrice": "1500000000",
        "feeWei": "31500000000000",
    }
    mined, _, _ = _drive(flows.status("t-1", retries=0), [_reply(200, {**STATUS, **cost})])
    assert (mined.block_number, mined.gas_used) == (16, 21_000)
    assert (mined.effective_gas_price, mined.fee_wei) == ("1500000000", "31500000000000")
    older, _, _ = _drive(flows.status("t-1", retries=0), [_reply(200, STATUS)])  # no such fields
    unknown = (older.block_number, older.gas_used, older.effective_gas_price, older.fee_wei)
    assert unknown == (None, None, None, None)


def test_a_batch_is_sent_as_decimal_strings_under_one_key_and_answered_in_order() -> None:
    flow = flows.submit_batch(
        [{"to": "0xdead", "value": 10**18}, {"to": "0xbeef", "gasLimit": 50_000}], None, 2
    )
    results = [
        {"transactionId": f"t-{n}", "status": "pending", "createdAt": STATUS["createdAt"]}
        for n in (1, 2)
    ]
    accepted, calls, sleeps = _drive(
        flow,
        [_reply(503, {"error": "unavailable", "detail": "db"}), _reply(202, {"results": results})],
    )
    assert [call.json for call in calls] == [
        {
            "transactions": [
                {"to": "0xdead", "value": "1000000000000000000"},
                {"to": "0xbeef", "gasLimit": "50000"},
            ]
        }
    ] * 2
    (key,) = {call.headers["Idempotency-Key"] for call in calls}  # the retry kept its key
    assert sleeps == [0.5]
    assert [a.transaction_id for a in accepted] == ["t-1", "t-2"]
    assert {a.idempotency_key for a in accepted} == {key}
    with pytest.raises(ValueError, match="1-100 transactions"):
        next(flows.submit_batch([{"to": "0xdead"}] * 101, None, 0))
    with pytest.raises(TypeError, match=r"transactions\[0\].value"):
        next(flows.submit_batch([{"to": "0xdead", "value": 1.5}], None, 0))


def test_a_speed_up_names_its_speed_and_reads_what_was_done() -> None:
    flow = flows.speed_up("t 1", "fastest", 0)
    body = {
        "transactionId": "t 1",
        "status": "submitted",
        "speed": "fastest",
        "speedUp": "sent",
        "hash": "0xabc",
        "detail": "replaced",
    }
    result, calls, _ = _drive(flow, [_reply(200, body)])
    (call,) = calls
    assert (call.method, call.path, call.json) == (
        "POST",
        "/api/v1/relay/transactions/t%201/speed-up",
        {"speed": "fastest"},
    )
    assert (result.speed_up, result.hash) == ("sent", "0xabc")
    with pytest.raises(ValueError, match="speed must be one of"):
        next(flows.speed_up("t-1", "ludicrous", 0))
