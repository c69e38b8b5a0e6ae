"""The committed OpenAPI document, services/relay-api/openapi.json: the contract generated
clients are built from. `make openapi` writes it from the app; the tests fail when the app's
document differs from it (services/relay-api/tests/test_openapi.py).

    uv run python tools/openapi.py            # write it
    uv run python tools/openapi.py --check    # exit 1 and say so when it is stale
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

PATH = Path(__file__).resolve().parents[1] / "services" / "relay-api" / "openapi.json"


def document() -> dict[str, Any]:
    """The app's document, built without connecting to anything (the lifespan never runs);
    nothing in it depends on the deployment's settings."""
    from relay_api.app import create_app
    from relay_api.settings import ApiSettings

    settings = ApiSettings(environment="dev", database_url="sqlite:///unused.db")
    return create_app(settings).openapi()


def render(spec: dict[str, Any]) -> str:
    return json.dumps(spec, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args()
    text = render(document())
    if args.check:
        if not PATH.exists() or PATH.read_text() != text:
            print(f"{PATH} differs from the app's document: run `make openapi`", file=sys.stderr)
            return 1
        print(f"{PATH.name} matches the app")
        return 0
    PATH.write_text(text)
    print(f"wrote {PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
