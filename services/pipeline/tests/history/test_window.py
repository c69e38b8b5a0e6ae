"""Windows, durations and the JDBC partition predicates built from them."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta

import pytest

from relay_pipeline.history.partitioning import int_boundaries, key_ranges, uuid_boundaries
from relay_pipeline.history.window import Window, parse_duration, parse_instant

NOW = datetime(2026, 3, 2, 12, 0)


def test_slices_cover_the_window_exactly_without_overlap():
    window = Window(datetime(2026, 3, 1), datetime(2026, 3, 1, 0, 0, 10))
    slices = window.slices(3)
    assert slices[0][0] == window.since
    assert slices[-1][1] == window.until
    assert all(a[1] == b[0] for a, b in itertools.pairwise(slices))
    assert window.predicates("created_at", 2) == [
        "created_at >= '2026-03-01 00:00:00.000000' AND created_at < '2026-03-01 00:00:05.000000'",
        "created_at >= '2026-03-01 00:00:05.000000' AND created_at < '2026-03-01 00:00:10.000000'",
    ]


def test_empty_window_is_refused():
    with pytest.raises(ValueError, match="empty window"):
        Window(NOW, NOW)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("30d", timedelta(days=30)), ("12h", timedelta(hours=12)), ("90s", timedelta(seconds=90)),
     ("2w", timedelta(weeks=2)), ("1.5h", timedelta(minutes=90))],
)  # fmt: skip
def test_durations(text, expected):
    assert parse_duration(text) == expected


def test_instants_are_naive_utc():
    assert parse_instant("-7d", now=NOW) == NOW - timedelta(days=7)
    assert parse_instant("2026-03-02T14:00:00+02:00") == datetime(2026, 3, 2, 12, 0)
    assert parse_instant("2026-03-02") == datetime(2026, 3, 2)
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("thirty days")


def test_uuid_key_ranges_cover_every_id_exactly_once():
    import uuid

    ids = sorted(str(uuid.uuid4()) for _ in range(2000))
    cuts = uuid_boundaries(ids[0], ids[-1], 4)
    assert len(cuts) == 3
    assert cuts == sorted(cuts)
    ranges = key_ranges("id", cuts)

    def matches(condition: str, value: str) -> bool:
        ok = True
        for part in condition.split(" AND "):
            _, op, literal = part.split(" ", 2)
            bound = literal.strip("'")
            ok &= value < bound if op == "<" else value >= bound
        return ok

    for value in [
        *ids,
        "00000000-0000-0000-0000-000000000000",
        "ffffffff-ffff-ffff-ffff-ffffffffffff",
    ]:
        assert sum(matches(r, value) for r in ranges) == 1
    # Random ids spread evenly: no partition gets more than twice its share.
    sizes = [sum(matches(r, v) for v in ids) for r in ranges]
    assert max(sizes) < 2 * len(ids) / 4


def test_keys_that_are_not_uuids_give_no_cuts_and_one_range():
    assert uuid_boundaries("a", "b", 4) == []
    assert key_ranges("id", []) == ["1 = 1"]
    assert int_boundaries(10, 50, 4) == [20, 30, 40]
    assert key_ranges("id", [20, 30]) == ["id < 20", "id >= 20 AND id < 30", "id >= 30"]
