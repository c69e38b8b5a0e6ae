"""JSON responses rendered with orjson (compact, as upstream's serde_json output is)."""

from __future__ import annotations

import json
from typing import Any

import orjson
from fastapi.responses import Response


class JSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        try:
            return orjson.dumps(content)
        except orjson.JSONEncodeError:
            # orjson stops at 64-bit integers; a wei amount (a balance) may be larger and is
            # still a JSON integer upstream (u128). The standard library writes any int.
            return json.dumps(content, separators=(",", ":"), ensure_ascii=False).encode()
