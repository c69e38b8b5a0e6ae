"""Garbage collector settings for the long-running services.

A service imports hundreds of thousands of objects that live as long as the process
(SQLAlchemy, FastAPI, pydantic and botocore models). CPython's full collection walks all of
them: measured in the API under 500 req/s, a full collection every one to three seconds took
56-158 ms, stalling every request in flight (docs/performance.md). Freezing what exists once
start-up is done moves those objects out of the collector's sight, so a full collection only
walks what was created since; the young generations are collected less often.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)

# Young-generation threshold: allocations minus deallocations between collections (CPython's
# default is 700, i.e. a collection every few requests).
YOUNG_THRESHOLD = 20_000


def freeze_after_startup() -> None:
    """Call once the service has built its clients, before it takes work."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
    log.debug("gc.frozen", extra={"frozen": gc.get_freeze_count()})
