"""relayer-stub fixtures. Helpers live in ``stub_testkit`` (on the root pytest ``pythonpath``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from stub_testkit import Stub, WebhookReceiver, make_settings, running

StubFactory = Callable[..., AbstractAsyncContextManager[Stub]]


@pytest.fixture
def stub_factory(tmp_path: Path) -> StubFactory:
    """``async with stub_factory(**settings) as stub``: a stub on this test's ledger file."""

    def factory(**overrides: Any) -> AbstractAsyncContextManager[Stub]:
        return running(make_settings(tmp_path, **overrides))

    return factory


@pytest.fixture
async def stub(stub_factory: StubFactory) -> AsyncIterator[Stub]:
    async with stub_factory() as running_stub:
        yield running_stub


@pytest.fixture
async def paused_stub(stub_factory: StubFactory) -> AsyncIterator[Stub]:
    async with stub_factory(lifecycle={"paused": True}) as running_stub:
        yield running_stub


@pytest.fixture
def webhook_receiver() -> Iterator[WebhookReceiver]:
    receiver = WebhookReceiver()
    receiver.thread.start()
    try:
        yield receiver
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()
