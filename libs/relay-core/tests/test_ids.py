"""relay_core.ids: what uuid.uuid4() would give, formatted without the UUID object."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable

import pytest

from relay_core import ids

_CANONICAL = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


@pytest.mark.parametrize("make", [lambda n: [ids.uuid4() for _ in range(n)], ids.uuid4_many])
def test_uuid4_is_a_canonical_random_version_4_uuid(make: Callable[[int], list[str]]) -> None:
    made = make(20_000)
    assert len(made) == 20_000
    assert len(set(made)) == len(made)
    for value in made[:2_000]:
        assert _CANONICAL.fullmatch(value), value
        parsed = uuid.UUID(value)
        assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122)
        assert str(parsed) == value
    # every variant digit turns up (the two random bits above the variant are used)
    assert {value[19] for value in made} == set("89ab")


def test_hex_ids_have_the_length_asked_for() -> None:
    assert re.fullmatch(r"[0-9a-f]{32}", ids.hex_id(16))
    assert re.fullmatch(r"[0-9a-f]{16}", ids.hex_id(8))
    assert ids.hex_id(8) != ids.hex_id(8)


def test_uuid4_many_of_none_is_none() -> None:
    assert ids.uuid4_many(0) == []
