"""JSON responses rendered with orjson (compact, fast, datetime-aware)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import JSONResponse


class Json(JSONResponse):
    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)
