"""Request dependencies, declared once and reached through ``Annotated`` aliases.

The relayer API routes take the runtime with :func:`runtime_of` rather than ``Depends``: at
thousands of sends a second FastAPI's dependency resolution costs more than the send itself.
Their Bearer check is in :mod:`relayer_stub.middleware`.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from relayer_stub.errors import AdminUnauthorized
from relayer_stub.middleware import bearer_token, token_matches
from relayer_stub.runtime import Runtime


def runtime_of(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


async def get_runtime(request: Request) -> Runtime:
    return runtime_of(request)


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


async def require_admin(request: Request, runtime: RuntimeDep) -> None:
    admin_token = runtime.settings.admin_token
    if admin_token is not None and not token_matches(
        bearer_token(request.scope["headers"]), admin_token.get_secret_value()
    ):
        raise AdminUnauthorized()
