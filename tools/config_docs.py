"""Render docs/configuration.md from the settings classes (``--check`` fails if it is stale).

uv run python tools/config_docs.py          # rewrite docs/configuration.md
uv run python tools/config_docs.py --check  # exit 1 when the file differs
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pydantic import AliasChoices
from pydantic_settings import BaseSettings

from queue_consumer.settings import ConsumerSettings
from relay_api.devserver import DevSettings
from relay_api.settings import ApiSettings
from relay_pipeline.settings import PipelineSettings
from relayer_stub.settings import StubSettings

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "configuration.md"

SERVICES: list[tuple[str, type[BaseSettings]]] = [
    ("relay-api (and the `relay` CLI)", ApiSettings),
    ("queue-consumer", ConsumerSettings),
    ("relayer-stub (development executor)", StubSettings),
    ("`make run` / `relay dev` (local development only)", DevSettings),
    ("relay-pipeline (batch job; docs/pipeline.md)", PipelineSettings),
]
# Settings classes that inherit the shared infrastructure settings but read only a few of them:
# their own fields and these are listed, not the queue, cache and executor settings they ignore.
ONLY_USED: dict[type[BaseSettings], tuple[str, ...]] = {
    PipelineSettings: ("database_url", "queue_visibility_timeout_s"),
}

HEADER = """# Configuration

Every setting comes from the environment. Infrastructure locations use their conventional
names (`DATABASE_URL`, `REDIS_URL`, `AWS_ENDPOINT_URL`, `PORT`); everything else is prefixed
with `RELAY_`. This file is generated from the settings classes by `tools/config_docs.py`, and
a test fails when it is out of date.

`make run` sets `RELAY_ENV=dev`, `DATABASE_URL=sqlite:///.relay/relay.db`,
`RELAY_CONSUMER_GRACE_S=20` and starts a local SQS server for `AWS_ENDPOINT_URL` and the
relayer-stub for `RELAY_EXECUTOR_URL` unless you set them; with the local chain it also sets
`RELAY_CHAIN_RPC_URL`, `RELAY_CHAIN_ID`, `RELAY_FORWARDER_ADDRESS` and the stub's
`STUB_CHAIN_RPC_URL` from what it started and deployed. `docker-compose.yml` and the ECS
template (`infra/cloudformation/relay.yaml`) set these same variables; see docs/local.md and
docs/deploy.md.
"""


def _env_names(name: str, field: Any, prefix: str) -> list[str]:
    alias = field.validation_alias
    if isinstance(alias, AliasChoices):
        return [str(choice) for choice in alias.choices]
    if isinstance(alias, str):
        return [alias]
    return [f"{prefix}{name}".upper()]


def _default(field: Any) -> str:
    if field.is_required():
        return "**required**"
    if field.default_factory is not None:
        return "(computed)"
    value = field.default
    if value is None:
        return "unset"
    if hasattr(value, "value"):
        value = value.value
    if hasattr(value, "get_secret_value"):
        return "(secret)"
    return f"`{value}`"


def render() -> str:
    lines = [HEADER]
    for title, settings_cls in SERVICES:
        prefix = str(settings_cls.model_config.get("env_prefix", ""))
        lines += [f"\n## {title}\n", "| variable | default | meaning |", "|---|---|---|"]
        inherited = ONLY_USED.get(settings_cls)
        listed = None if inherited is None else {*inherited, *settings_cls.__annotations__}
        for name, field in settings_cls.model_fields.items():
            if listed is not None and name not in listed:
                continue
            names = " / ".join(f"`{env}`" for env in _env_names(name, field, prefix))
            description = (field.description or "").replace("|", "\\|")
            lines.append(f"| {names} | {_default(field)} | {description} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv:
        if not TARGET.exists() or TARGET.read_text() != text:
            sys.stderr.write(
                "docs/configuration.md is stale: run uv run python tools/config_docs.py\n"
            )
            return 1
        return 0
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
