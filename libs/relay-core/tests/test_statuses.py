from __future__ import annotations

import pytest

from relay_core.statuses import TERMINAL, TxStatus, can_advance

S = TxStatus


@pytest.mark.parametrize(
    ("current", "new", "allowed"),
    [
        (S.pending, S.processing, True),
        (S.pending, S.submitted, True),
        (S.processing, S.submitted, True),
        (S.submitted, S.mined, True),
        (S.mined, S.confirmed, True),
        (S.submitted, S.confirmed, True),
        (S.submitted, S.failed, True),
        (S.pending, S.expired, True),
        (S.processing, S.canceled, True),
        (S.mined, S.submitted, False),
        (S.confirmed, S.mined, False),
        (S.confirmed, S.failed, False),
        (S.failed, S.confirmed, False),
        (S.expired, S.submitted, False),
        (S.submitted, S.submitted, False),
        (S.processing, S.pending, False),
    ],
)
def test_status_moves_only_forward_and_never_out_of_a_terminal_state(
    current: TxStatus, new: TxStatus, allowed: bool
) -> None:
    assert can_advance(current, new) is allowed


def test_terminal_statuses_are_the_four_final_ones() -> None:
    assert {s.value for s in TERMINAL} == {"confirmed", "failed", "expired", "canceled"}
