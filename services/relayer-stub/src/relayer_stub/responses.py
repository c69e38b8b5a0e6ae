"""JSON responses rendered with orjson (compact, as upstream's serde_json output is)."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi.responses import Response


class JSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)
