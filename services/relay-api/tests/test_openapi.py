"""The OpenAPI document as a contract: the committed services/relay-api/openapi.json is the
app's (regenerate with `make openapi`), every request and response has an example that its own
schema accepts, every operation has a stable id, a tag and its security, and a client
generated from the document (openapi-python-client) builds, takes the examples, and talks to
the real app."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

ROOT = Path(__file__).resolve().parents[3]
COMMITTED = ROOT / "services" / "relay-api" / "openapi.json"
PUBLIC = {"health", "ready", "receiveExecutorWebhook"}  # no API key (the webhook is signed)


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    import json

    return dict(json.loads(COMMITTED.read_text()))


def _operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, operation)
        for path, operations in spec["paths"].items()
        for method, operation in operations.items()
    ]


def test_the_committed_document_is_the_apps() -> None:
    checked = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "openapi.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stderr


def test_every_body_has_an_example_its_schema_accepts(spec: dict[str, Any]) -> None:
    checked = 0
    for method, path, operation in _operations(spec):
        bodies = [("request", operation.get("requestBody", {}).get("content", {}))]
        bodies += [(status, r.get("content", {})) for status, r in operation["responses"].items()]
        for what, content in bodies:
            for media_type, media in content.items():
                where = f"{method} {path} {what} {media_type}"
                assert "example" in media, f"{where}: no example"
                schema = {**media["schema"], "components": spec["components"]}
                try:
                    jsonschema.validate(
                        media["example"], schema, cls=jsonschema.Draft202012Validator
                    )
                except jsonschema.ValidationError as exc:
                    pytest.fail(f"{where}: the example breaks its schema: {exc.message}")
                checked += 1
    assert checked > 130  # every status of every operation, not a handful


def test_operations_have_stable_ids_tags_and_their_security(spec: dict[str, Any]) -> None:
    ids = [operation["operationId"] for _, _, operation in _operations(spec)]
    assert len(ids) == len(set(ids))
    assert all(id_[0].islower() and "_" not in id_ for id_ in ids), ids  # camelCase, chosen
    for method, path, operation in _operations(spec):
        assert operation.get("tags"), f"{method} {path}: no tag"
        if operation["operationId"] in PUBLIC:
            continue
        assert operation.get("security") == [{"ApiKey": []}], f"{method} {path}: no security"
        assert "401" in operation["responses"], f"{method} {path}: 401 not documented"
    scheme = spec["components"]["securitySchemes"]["ApiKey"]
    assert (scheme["type"], scheme["in"], scheme["name"]) == ("apiKey", "header", "X-API-Key")
    assert "HTTPValidationError" not in spec["components"]["schemas"]  # never sent


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A Python client generated from the committed document, importable as relay_generated."""
    out = tmp_path_factory.mktemp("generated")
    bin_dir = Path(sys.executable).parent
    made = subprocess.run(
        [
            str(bin_dir / "openapi-python-client"),
            "generate",
            "--path",
            str(COMMITTED),
            "--output-path",
            str(out / "relay_generated"),
            "--meta",
            "none",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},  # its formatter (ruff) from the venv
    )
    assert made.returncode == 0, made.stdout + made.stderr
    assert "Warning" not in made.stdout, made.stdout  # nothing in the document was skipped
    compiled = subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(out / "relay_generated")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert compiled.returncode == 0, compiled.stdout
    sys.path.insert(0, str(out))
    try:
        yield importlib.import_module("relay_generated")
    finally:
        sys.path.remove(str(out))


def test_a_generated_client_takes_every_example_and_talks_to_the_app(
    spec: dict[str, Any], generated: Any
) -> None:
    models = importlib.import_module("relay_generated.models")
    for name, schema in spec["components"]["schemas"].items():
        example = next(
            (
                media["example"]
                for _, _, operation in _operations(spec)
                for media in _media(operation)
                if media["schema"].get("$ref") == f"#/components/schemas/{name}"
            ),
            None,
        )
        if example is None or "enum" in schema:
            continue
        model = getattr(models, name)
        assert model.from_dict(example).to_dict() == example, name
    modules = {
        operation["operationId"]: f"relay_generated.api.{operation['tags'][0]}."
        + "".join(f"_{c.lower()}" if c.isupper() else c for c in operation["operationId"])
        for _, _, operation in _operations(spec)
    }
    for module in modules.values():
        importlib.import_module(module)


async def test_the_generated_client_submits_and_reads_a_status(
    generated: Any, client: httpx.AsyncClient, api_key: str
) -> None:
    from relay_generated.api.relay import get_status, submit_direct  # type: ignore[import-not-found]
    from relay_generated.client import AuthenticatedClient  # type: ignore[import-not-found]
    from relay_generated.models import DirectRequest  # type: ignore[import-not-found]

    api = AuthenticatedClient(
        base_url="http://test", token=api_key, prefix="", auth_header_name="X-API-Key"
    )
    client.headers["X-API-Key"] = api_key
    api.set_async_httpx_client(client)
    body = DirectRequest.from_dict({"to": "0x000000000000000000000000000000000000dEaD"})
    accepted = await submit_direct.asyncio_detailed(client=api, body=body)
    assert accepted.status_code == 202, accepted.content
    status = await get_status.asyncio(client=api, transaction_id=accepted.parsed.transaction_id)
    assert status.status.value == "pending"
    assert status.transaction_id == accepted.parsed.transaction_id


def _media(operation: dict[str, Any]) -> list[dict[str, Any]]:
    content = list(operation.get("requestBody", {}).get("content", {}).values())
    for response in operation["responses"].values():
        content += list(response.get("content", {}).values())
    return content
