"""The local servers' port picking: a free loopback port, never the API's own PORT (make run
starts SQS, the chain and the executor before the API binds it)."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from relay_devstack import localsqs


def test_a_free_port_is_never_the_apis_port(monkeypatch: pytest.MonkeyPatch) -> None:
    offered = iter([8123, 8123, 40001])

    class FakeSocket:
        def __init__(self, *_: Any) -> None:
            self.port = next(offered)

        def __enter__(self) -> FakeSocket:
            return self

        def __exit__(self, *_: Any) -> None:
            pass

        def bind(self, _: Any) -> None:
            pass

        def getsockname(self) -> tuple[str, int]:
            return ("127.0.0.1", self.port)

    monkeypatch.setenv("PORT", "8123")
    monkeypatch.setattr(localsqs.socket, "socket", FakeSocket)
    assert localsqs.free_port() == 40001


def test_a_free_port_can_be_bound() -> None:
    port = localsqs.free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))
