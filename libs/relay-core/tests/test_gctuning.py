from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from relay_core import gctuning


@pytest.fixture
def restore_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.usefixtures("restore_gc")
def test_start_up_objects_are_frozen_out_of_full_collections() -> None:
    gc.unfreeze()
    survivor = [object() for _ in range(1000)]
    gctuning.freeze_after_startup()
    assert gc.get_freeze_count() >= len(survivor)
    assert gc.get_threshold()[0] == gctuning.YOUNG_THRESHOLD
    # What a full collection walks is what was created since, a small part of the process.
    assert len(gc.get_objects()) < gc.get_freeze_count() / 10
