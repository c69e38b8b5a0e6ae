"""services/*/Dockerfile and .dockerignore, checked without a Docker engine.

Each service image must be: built from the repository root with uv, the locked dependencies in
a layer of their own before any source, a small final stage without build tools, a non-root
user, a HEALTHCHECK, and tini as PID 1 forwarding SIGTERM to an exec-form command. hadolint
lints every Dockerfile; the mutation tests show each check fails when its property goes.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UV_PINNED = re.compile(r"^ghcr\.io/astral-sh/uv:\d+\.\d+\.\d+$")


@dataclass(frozen=True)
class Expect:
    package: str
    health: str  # a word the HEALTHCHECK command must contain; "NONE" for a batch job
    command: str  # first word of CMD


SERVICES = {
    "services/relay-api": Expect("relay-api", "/health", "relay"),
    "services/queue-consumer": Expect("queue-consumer", "--check", "queue-consumer"),
    "services/relayer-stub": Expect("relayer-stub", "/api/v1/health", "relayer-stub"),
    "services/pipeline": Expect("relay-pipeline", "NONE", "relay-pipeline"),
}


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str

    def words(self) -> list[str]:
        return shlex.split(self.args)


def parse(text: str) -> list[Instruction]:
    instructions: list[Instruction] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, args = line.partition(" ")
        instructions.append(Instruction(keyword.upper(), args.strip()))
    return instructions


def stages(instructions: list[Instruction]) -> list[list[Instruction]]:
    result: list[list[Instruction]] = []
    for instruction in instructions:
        if instruction.keyword == "FROM":
            result.append([])
        if result:
            result[-1].append(instruction)
    return result


def workspace_members() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    members: set[str] = set()
    for pattern in config["tool"]["uv"]["workspace"]["members"]:
        for path in ROOT.glob(pattern):
            if (path / "pyproject.toml").is_file():
                members.add(f"{path.relative_to(ROOT).as_posix()}/pyproject.toml")
    return members


def _exec_form(args: str) -> list[str] | None:
    try:
        value = json.loads(args)
    except ValueError:
        return None
    return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None


def _copy_parts(instruction: Instruction) -> tuple[list[str], str]:
    words = [w for w in instruction.words() if not w.startswith("--")]
    return words[:-1], words[-1]


def _copy_sources(instruction: Instruction) -> list[str]:
    return _copy_parts(instruction)[0]


def _is_uv_sync(instruction: Instruction) -> bool:
    return instruction.keyword == "RUN" and "uv sync" in instruction.args


def dockerfile_problems(text: str, expect: Expect, members: set[str]) -> list[str]:
    problems: list[str] = []
    all_stages = stages(parse(text))
    if len(all_stages) < 2:
        return ["must be a multi-stage build (a build stage and a small final stage)"]

    for stage in all_stages:
        image = stage[0].words()[0]
        if image.endswith(":latest") or ":" not in image:
            problems.append(f"base image {image} must have a pinned tag")
        if "astral-sh/uv" in image and not UV_PINNED.match(image):
            problems.append(f"uv image {image} must be pinned to x.y.z")

    build = next((s for s in all_stages if any(_is_uv_sync(i) for i in s)), None)
    if build is None:
        return [*problems, "no stage installs with `uv sync`"]
    syncs = [i for i in build if _is_uv_sync(i)]
    first_sync = build.index(syncs[0])
    copied_before = [
        source
        for i in build[:first_sync]
        if i.keyword == "COPY" and "--from=" not in i.args
        for source in _copy_sources(i)
    ]
    code_before = [
        s for s in copied_before if not s.endswith(("pyproject.toml", "uv.lock")) and "/" in s
    ]
    code_before += [s for s in copied_before if s in {".", "libs", "services", "src"}]
    if code_before:
        problems.append(f"source copied before the dependency layer: {code_before}")
    normalised = {s.rstrip("/") for s in copied_before}
    missing = sorted(m for m in members if m not in normalised)
    if missing or "uv.lock" not in normalised or "pyproject.toml" not in normalised:
        problems.append(
            f"the dependency layer needs uv.lock and every member's pyproject.toml: {missing}"
        )
    dependency_flags = ("--locked", "--no-dev", f"--package {expect.package}")
    first = syncs[0].args
    if not any(flag in first for flag in ("--no-install-workspace", "--no-install-project")):
        problems.append("the first `uv sync` must install dependencies only (--no-install-*)")
    for flag in dependency_flags:
        if flag not in first:
            problems.append(f"the dependency layer's `uv sync` must use {flag}")
    if len(syncs) < 2 or "--no-editable" not in syncs[-1].args or "--locked" not in syncs[-1].args:
        problems.append("the source layer must `uv sync --locked --no-editable` after COPY")
    elif not any(i.keyword == "COPY" for i in build[first_sync : build.index(syncs[-1])]):
        problems.append("the source must be copied between the two `uv sync` layers")

    final = all_stages[-1]
    final_image = final[0].words()[0]
    if "slim" not in final_image and "distroless" not in final_image:
        problems.append(f"final stage must be slim, is {final_image}")
    if final is build:
        problems.append("the final stage must not be the build stage")
    for instruction in final:
        if instruction.keyword == "COPY" and not any(
            w.startswith("--from=") for w in instruction.words()
        ):
            problems.append(f"final stage copies from the build context: COPY {instruction.args}")
        if instruction.keyword == "COPY" and "/uv" in instruction.args:
            problems.append("uv must not be in the final image")
        if instruction.keyword == "ENV" and re.search(
            r"(PASSWORD|SECRET|TOKEN|API_KEY|SIGNING_KEY)\w*=", instruction.args
        ):
            problems.append(f"secret baked into the image: ENV {instruction.args}")
        if instruction.keyword == "ADD" and "://" in instruction.args:
            problems.append("ADD from a URL: download in a verified RUN step instead")

    users = [i.words()[0] for i in final if i.keyword == "USER"]
    if not users or users[-1].split(":")[0] in {"root", "0"}:
        problems.append("the final stage must switch to a non-root USER")

    healthchecks = [i for i in final if i.keyword == "HEALTHCHECK"]
    if not healthchecks:
        problems.append("no HEALTHCHECK in the final stage")
    elif expect.health == "NONE":
        if healthchecks[-1].args.strip() != "NONE":
            problems.append("a batch job declares HEALTHCHECK NONE")
    else:
        args = healthchecks[-1].args
        command = _exec_form(args[args.find("CMD") + 3 :].strip()) if "CMD" in args else None
        if command is None or not any(expect.health in word for word in command):
            problems.append(f"HEALTHCHECK must be an exec-form CMD using {expect.health}")

    entrypoints = [i for i in final if i.keyword == "ENTRYPOINT"]
    entrypoint = _exec_form(entrypoints[-1].args) if entrypoints else None
    if not entrypoint or Path(entrypoint[0]).name not in {"tini", "dumb-init"}:
        problems.append("PID 1 must be an init (tini) that forwards SIGTERM: exec-form ENTRYPOINT")
    commands = [i for i in final if i.keyword == "CMD"]
    command = _exec_form(commands[-1].args) if commands else None
    if not command or command[0] != expect.command:
        problems.append(f"CMD must be exec form starting with {expect.command}")
    stop = [i.args for i in final if i.keyword == "STOPSIGNAL"]
    if stop and stop[-1] not in {"SIGTERM", "15"}:
        problems.append("STOPSIGNAL must be SIGTERM (the services drain on it)")
    return problems


def dockerfiles() -> list[Path]:
    return [ROOT / service / "Dockerfile" for service in SERVICES if (ROOT / service).is_dir()]


# --- tests --------------------------------------------------------------------------------


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_every_service_has_a_dockerfile_that_meets_the_rules(service: str) -> None:
    if not (ROOT / service).is_dir():
        pytest.fail(f"{service} is listed here but does not exist; update SERVICES")
    path = ROOT / service / "Dockerfile"
    assert path.is_file(), f"{service} has no Dockerfile"
    assert dockerfile_problems(path.read_text(), SERVICES[service], workspace_members()) == []


def test_every_service_with_an_entry_point_is_listed() -> None:
    for pyproject in (ROOT / "services").glob("*/pyproject.toml"):
        if "scripts" in tomllib.loads(pyproject.read_text()).get("project", {}):
            assert pyproject.parent.relative_to(ROOT).as_posix() in SERVICES


def test_hadolint_passes() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    result = subprocess.run(
        [hadolint, *map(str, dockerfiles())], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_dependency_layer_context_satisfies_uv_lock_check(tmp_path: Path) -> None:
    """Exactly the files the Dockerfiles copy before `uv sync --locked` are enough for it."""
    path = ROOT / "services/relay-api/Dockerfile"
    build = next(s for s in stages(parse(path.read_text())) if any(_is_uv_sync(i) for i in s))
    first_sync = next(n for n, i in enumerate(build) if _is_uv_sync(i))
    for instruction in build[:first_sync]:
        if instruction.keyword != "COPY" or "--from=" in instruction.args:
            continue
        sources, destination = _copy_parts(instruction)
        for source in sources:
            target = tmp_path / destination / Path(source).name
            if destination.endswith("/") and destination != "./":
                target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / source, target)
    uv = os.environ.get("UV") or shutil.which("uv") or str(Path.home() / ".local/bin/uv")
    result = subprocess.run(
        [uv, "lock", "--check", "--offline"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def dockerignore_excludes(path: str) -> bool:
    """Docker's rule: the last matching pattern wins; `!` re-includes."""
    excluded = False
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.lstrip("!").strip("/")
        regex = ""
        index = 0
        while index < len(pattern):
            if pattern.startswith("**/", index):
                regex += "(?:.*/)?"
                index += 3
            elif pattern.startswith("**", index):
                regex += ".*"
                index += 2
            elif pattern[index] == "*":
                regex += "[^/]*"
                index += 1
            elif pattern[index] == "?":
                regex += "[^/]"
                index += 1
            else:
                regex += re.escape(pattern[index])
                index += 1
        if re.fullmatch(regex + "(?:/.*)?", path):
            excluded = not negate
    return excluded


@pytest.mark.parametrize(
    "path",
    [
        ".venv/bin/python",
        ".git/HEAD",
        ".relay/relay.db",
        ".tools/sqs/bin/ministack",
        ".env",
        "services/relay-api/tests/test_accept.py",
        "libs/relay-core/src/relay_core/__pycache__/queue.cpython-311.pyc",
    ],
)
def test_dockerignore_keeps_state_secrets_and_tests_out_of_the_context(path: str) -> None:
    assert dockerignore_excludes(path)


@pytest.mark.parametrize(
    "path",
    [
        "uv.lock",
        "pyproject.toml",
        "libs/relay-core/pyproject.toml",
        "libs/relay-core/src/relay_core/queue.py",
        "services/relay-api/pyproject.toml",
        "services/queue-consumer/src/queue_consumer/main.py",
        "libs/relay-client/src/relay_client/client.py",
        "libs/relay-client/README.md",  # its pyproject's readme: the wheel build reads it
    ],
)
def test_dockerignore_keeps_what_the_build_needs(path: str) -> None:
    assert not dockerignore_excludes(path)


# --- each rule can fail -------------------------------------------------------------------

API = (ROOT / "services/relay-api/Dockerfile").read_text()


def _drop_line(text: str, starts: str) -> str:
    lines = text.splitlines()
    index = next(n for n, line in enumerate(lines) if line.startswith(starts))
    while lines[index].rstrip().endswith("\\"):
        del lines[index]
    del lines[index]
    return "\n".join(lines) + "\n"


MUTATIONS = {
    "no user": (lambda t: _drop_line(t, "USER "), "non-root USER"),
    "root user": (lambda t: t.replace("USER 10001:10001", "USER root"), "non-root USER"),
    "no healthcheck": (lambda t: _drop_line(t, "HEALTHCHECK"), "no HEALTHCHECK"),
    "no tini": (lambda t: _drop_line(t, "ENTRYPOINT"), "PID 1"),
    "shell-form cmd": (
        lambda t: t.replace('CMD ["relay", "serve"]', "CMD relay serve"),
        "CMD must be exec form",
    ),
    "source before deps": (
        lambda t: t.replace(
            "COPY uv.lock pyproject.toml ./", "COPY uv.lock pyproject.toml ./\nCOPY libs libs"
        ),
        "source copied before",
    ),
    "unlocked": (
        lambda t: t.replace(
            "--locked --no-dev --no-install-workspace", "--no-dev --no-install-workspace"
        ),
        "--locked",
    ),
    "single stage": (
        lambda t: t[: t.index("# --- runtime")],
        "final stage",
    ),
    "member missing": (
        lambda t: _drop_line(t, "COPY services/queue-consumer/pyproject.toml"),
        "every member's pyproject.toml",
    ),
    "uv latest": (
        lambda t: t.replace("ghcr.io/astral-sh/uv:0.13.9", "ghcr.io/astral-sh/uv:latest"),
        "pinned",
    ),
    "secret in env": (
        lambda t: t.replace("PORT=8000", "PORT=8000 RELAY_EXECUTOR_API_KEY=abc"),
        "secret baked",
    ),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_each_dockerfile_rule_is_checked(mutation: str) -> None:
    mutate, expected = MUTATIONS[mutation]
    problems = dockerfile_problems(mutate(API), SERVICES["services/relay-api"], workspace_members())
    assert any(expected in problem for problem in problems), problems
