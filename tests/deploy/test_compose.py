"""docker-compose.yml and .env.example, checked without a Docker engine.

`make check-deploy` also runs `docker-compose config` (Compose's own schema and interpolation);
these tests check what the schema cannot: the services, health checks and start order, the
init step, a scalable consumer, and no secret outside .env.example. The mutation tests show
that each check fails when its property is removed.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"

INFRA = ("sqs", "mysql", "redis", "relayer-stub")
APPS = ("relay-api", "queue-consumer")
INIT = "relay-init"
BUILT = {
    "relay-api": "services/relay-api/Dockerfile",
    INIT: "services/relay-api/Dockerfile",
    "queue-consumer": "services/queue-consumer/Dockerfile",
    "relayer-stub": "services/relayer-stub/Dockerfile",
}
SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|API_KEY|SIGNING_KEY")
VARIABLE = re.compile(r"\$\{([A-Z0-9_]+)([^}]*)\}")
# A reference with no value of its own: ${X}, ${X:?why}, ${X?why}, or an empty default.
BARE_REFERENCE = re.compile(r"^\$\{[A-Z0-9_]+(?::?\?[^}]*|:?-)?\}$")


def load() -> dict[str, Any]:
    return dict(yaml.safe_load(COMPOSE.read_text()))


def env_example_names() -> set[str]:
    names = set()
    for line in ENV_EXAMPLE.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#") and "=" in line:
            names.add(line.split("=", 1)[0].strip())
    return names


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def seconds(duration: str) -> float:
    total = 0.0
    for amount, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", str(duration)):
        total += float(amount) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]
    return total


def _dependencies(service: dict[str, Any]) -> dict[str, str]:
    depends = service.get("depends_on") or {}
    if isinstance(depends, list):
        return {name: "service_started" for name in depends}
    return {
        name: (spec or {}).get("condition", "service_started") for name, spec in depends.items()
    }


def compose_problems(doc: dict[str, Any], defined: set[str]) -> list[str]:
    problems: list[str] = []
    services: dict[str, Any] = doc.get("services", {})
    for name in (*INFRA, INIT, *APPS):
        if name not in services:
            problems.append(f"service {name} is missing")
    if problems:
        return problems

    sqs = services["sqs"]
    image = str(sqs.get("image"))
    if "localstack/localstack:" not in image or "${SQS_IMAGE" not in image:
        problems.append("sqs: LocalStack by default, overridable with SQS_IMAGE (ministack)")
    elif image.rstrip("}").endswith(":latest"):
        problems.append("sqs: the LocalStack image must be pinned (latest now wants an account)")
    if not BARE_REFERENCE.match(environment(sqs).get("LOCALSTACK_AUTH_TOKEN", "")):
        problems.append("sqs: LOCALSTACK_AUTH_TOKEN must be passed through from the environment")
    if not any(str(port).endswith(":4566") for port in sqs.get("ports", [])):
        problems.append("sqs: must publish port 4566")
    if not str(services["mysql"].get("image", "")).startswith("mysql:8"):
        problems.append("mysql: must be MySQL 8")
    if not str(services["redis"].get("image", "")).startswith("redis:7"):
        problems.append("redis: must be Redis 7")

    for name, service in services.items():
        if name == INIT:
            continue
        test = (service.get("healthcheck") or {}).get("test")
        if not test or test == ["NONE"] or (service.get("healthcheck") or {}).get("disable"):
            problems.append(f"{name}: no health check")
        for port in service.get("ports", []):
            if not str(port).startswith("127.0.0.1:"):
                problems.append(f"{name}: port {port} must be bound to 127.0.0.1")

    init = services[INIT]
    command = " ".join(init.get("command") or [])
    for step in ("relay db upgrade", "relay queues create"):
        if step not in command:
            problems.append(f"{INIT}: must run `{step}` (migrations; queue + DLQ + redrive)")
    init_deps = _dependencies(init)
    for name in ("sqs", "mysql"):
        if init_deps.get(name) != "service_healthy":
            problems.append(f"{INIT}: must wait for {name} to be healthy")

    for name in APPS:
        deps = _dependencies(services[name])
        if deps.get(INIT) != "service_completed_successfully":
            problems.append(f"{name}: must wait for {INIT} to complete successfully")
        for infra in INFRA:
            if deps.get(infra) != "service_healthy":
                problems.append(f"{name}: must depend on {infra} with condition service_healthy")

    consumer = services["queue-consumer"]
    if "container_name" in consumer or consumer.get("ports"):
        problems.append("queue-consumer: no container_name or host ports (docker compose --scale)")
    grace = float(environment(consumer).get("RELAY_CONSUMER_GRACE_S", "110"))
    if seconds(consumer.get("stop_grace_period", "10s")) <= grace:
        problems.append("queue-consumer: stop_grace_period must exceed RELAY_CONSUMER_GRACE_S")
    if environment(services["relay-api"]).get("RELAY_HOST") != "0.0.0.0":  # noqa: S104
        problems.append("relay-api: RELAY_HOST must be 0.0.0.0 in a container")

    for name, dockerfile in BUILT.items():
        build = services[name].get("build") or {}
        if build.get("context") != "." or build.get("dockerfile") != dockerfile:
            problems.append(f"{name}: must build {dockerfile} from the repository root")

    for name, service in services.items():
        for key, value in environment(service).items():
            if SECRET_NAME.search(key) and not BARE_REFERENCE.match(value):
                problems.append(f"{name}: {key} is hard-coded; take it from .env")
            if "://" in value and "@" in value:
                credentials = value.split("://", 1)[1].split("@", 1)[0]
                password = credentials.split(":", 1)[1] if ":" in credentials else ""
                if password and not BARE_REFERENCE.match(password):
                    problems.append(f"{name}: {key} has a hard-coded password")

    text = yaml.safe_dump(doc)
    for variable, _ in VARIABLE.findall(text):
        if variable not in defined:
            problems.append(f"${{{variable}}} is used but not in .env.example")
    return sorted(set(problems))


# --- tests --------------------------------------------------------------------------------


def test_compose_file_meets_the_requirements() -> None:
    assert compose_problems(load(), env_example_names()) == []


def test_env_example_is_the_only_place_with_secret_values() -> None:
    assert ".env" in (ROOT / ".gitignore").read_text().split()
    names = env_example_names()
    for required in ("MYSQL_PASSWORD", "MYSQL_ROOT_PASSWORD", "STUB_API_KEY"):
        assert required in names
    # Every required (${X:?...}) variable is explained in .env.example.
    required_refs = {v for v, rest in VARIABLE.findall(COMPOSE.read_text()) if "?" in rest}
    assert required_refs <= names


def test_ministack_is_the_documented_token_free_alternative() -> None:
    for path in (COMPOSE, ENV_EXAMPLE, ROOT / "docs" / "local.md"):
        assert "SQS_IMAGE=ministackorg/ministack" in path.read_text(), path


def _env(service: str, key: str, value: str | None) -> Callable[[dict[str, Any]], None]:
    def mutate(doc: dict[str, Any]) -> None:
        env = doc["services"][service]["environment"]
        if value is None:
            del env[key]
        else:
            env[key] = value

    return mutate


def _condition(service: str, dependency: str, condition: str) -> Callable[[dict[str, Any]], None]:
    def mutate(doc: dict[str, Any]) -> None:
        doc["services"][service]["depends_on"][dependency]["condition"] = condition

    return mutate


def _pop(service: str, key: str) -> Callable[[dict[str, Any]], None]:
    def mutate(doc: dict[str, Any]) -> None:
        doc["services"][service].pop(key)

    return mutate


def _set(service: str, key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(doc: dict[str, Any]) -> None:
        doc["services"][service][key] = value

    return mutate


def _drop_service(service: str) -> Callable[[dict[str, Any]], None]:
    def mutate(doc: dict[str, Any]) -> None:
        del doc["services"][service]

    return mutate


MUTATIONS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "no localstack token": (_env("sqs", "LOCALSTACK_AUTH_TOKEN", None), "LOCALSTACK_AUTH_TOKEN"),
    "localstack latest": (
        _set("sqs", "image", "${SQS_IMAGE:-localstack/localstack:latest}"),
        "must be pinned",
    ),
    "redis without health check": (_pop("redis", "healthcheck"), "redis: no health check"),
    "api starts before mysql is healthy": (
        _condition("relay-api", "mysql", "service_started"),
        "relay-api: must depend on mysql",
    ),
    "consumer does not wait for init": (
        _condition("queue-consumer", INIT, "service_started"),
        "queue-consumer: must wait for relay-init",
    ),
    "no init step": (_drop_service(INIT), "relay-init is missing"),
    "init does not create queues": (
        _set(INIT, "command", ["relay", "db", "upgrade"]),
        "relay queues create",
    ),
    "consumer not scalable": (_set("queue-consumer", "container_name", "c1"), "--scale"),
    "consumer killed mid-drain": (_pop("queue-consumer", "stop_grace_period"), "stop_grace"),
    "hard-coded password": (_env("mysql", "MYSQL_PASSWORD", "hunter2"), "hard-coded"),
    "password in url": (
        _env("relay-api", "DATABASE_URL", "mysql://relay:hunter2@mysql:3306/relay"),
        "hard-coded password",
    ),
    "mysql 5": (_set("mysql", "image", "mysql:5.7"), "MySQL 8"),
    "public port": (_set("relay-api", "ports", ["8000:8000"]), "127.0.0.1"),
    "undeclared variable": (_env("relay-api", "RELAY_LOG_LEVEL", "${NOT_IN_ENV}"), ".env.example"),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_each_compose_requirement_is_checked(mutation: str) -> None:
    mutate, expected = MUTATIONS[mutation]
    doc = copy.deepcopy(load())
    mutate(doc)
    problems = compose_problems(doc, env_example_names())
    assert any(expected in problem for problem in problems), problems
