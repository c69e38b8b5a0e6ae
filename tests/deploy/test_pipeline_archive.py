"""infra/cloudformation/relay.yaml: the daily archive of finished history (relay-pipeline).

With a PipelineImage, EventBridge Scheduler runs `relay-pipeline archive --older-than 1d --out
s3a://<ArchiveBucket>/archive/` on Fargate every day; without one, nothing of it is created.
Each promise is checked, and each check is shown to notice its promise broken.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cfnlint.decode import decode_str

TEMPLATE = Path(__file__).resolve().parents[2] / "infra" / "cloudformation" / "relay.yaml"
PIPELINE = (
    "ArchiveBucket",
    "ArchiveBucketTlsOnlyPolicy",
    "PipelineLogGroup",
    "PipelineSecurityGroup",
    "DatabaseIngressFromPipeline",
    "PipelineExecutionRole",
    "PipelineTaskRole",
    "PipelineTaskDefinition",
    "PipelineSchedulerRole",
    "PipelineArchiveSchedule",
)


def _template() -> dict[str, Any]:
    template, matches = decode_str(TEMPLATE.read_text())
    assert not matches, matches
    assert template is not None
    return dict(template)


def _ref(value: Any) -> str | None:
    return str(value["Ref"]) if isinstance(value, dict) and "Ref" in value else None


def _getatt(value: Any) -> tuple[str, str] | None:
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        target = value["Fn::GetAtt"]
        if isinstance(target, str):
            target = target.split(".", 1)
        return str(target[0]), str(target[1])
    return None


def _sub_text(value: Any) -> str:
    if isinstance(value, dict) and "Fn::Sub" in value:
        sub = value["Fn::Sub"]
        return str(sub if isinstance(sub, str) else sub[0])
    return str(value)


def _props(template: dict[str, Any], name: str) -> dict[str, Any]:
    return dict(template["Resources"].get(name, {}).get("Properties", {}))


def _statements(template: dict[str, Any], role: str) -> list[dict[str, Any]]:
    return [
        statement
        for policy in _props(template, role).get("Policies", [])
        for statement in policy["PolicyDocument"]["Statement"]
    ]


def _listify(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def pipeline_problems(template: dict[str, Any]) -> list[str]:
    problems = []
    resources = template["Resources"]
    for name in PIPELINE:
        if resources.get(name, {}).get("Condition") != "HasPipeline":
            problems.append(f"{name} must exist only with a PipelineImage (Condition HasPipeline)")

    bucket = resources.get("ArchiveBucket", {})
    if bucket.get("DeletionPolicy") != "Retain" or bucket.get("UpdateReplacePolicy") != "Retain":
        problems.append("ArchiveBucket must be retained: it is the only copy of archived history")
    bucket_props = bucket.get("Properties", {})
    if bucket_props.get("VersioningConfiguration", {}).get("Status") != "Enabled":
        problems.append("ArchiveBucket must keep versions (an overwrite or delete is undoable)")
    block = bucket_props.get("PublicAccessBlockConfiguration", {})
    if not all(block.get(k) for k in ("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls",
                                         "RestrictPublicBuckets")):  # fmt: skip
        problems.append("ArchiveBucket must block every kind of public access")
    if not bucket_props.get("BucketEncryption"):
        problems.append("ArchiveBucket must be encrypted at rest")

    definition = _props(template, "PipelineTaskDefinition")
    containers = definition.get("ContainerDefinitions", [{}])
    command = containers[0].get("Command", [])
    words = [str(_ref(w) or w) for w in command]
    older = words[words.index("--older-than") + 1] if "--older-than" in words else None
    parameter = template["Parameters"].get(older or "", {})
    if words[:2] != ["relay-pipeline", "archive"] or parameter.get("Default") != "1d":
        problems.append("the scheduled task must run `relay-pipeline archive --older-than 1d`")
    out = command[words.index("--out") + 1] if "--out" in words else ""
    if not _sub_text(out).startswith("s3a://${ArchiveBucket}/"):
        problems.append("the scheduled archive must write to s3a://<ArchiveBucket>/…")
    env = {item["Name"]: item["Value"] for item in containers[0].get("Environment", [])}
    if "DATABASE_URL" in env or not any(
        s["Name"] == "DATABASE_URL" and _ref(s["ValueFrom"]) == "DatabaseUrlSecretArn"
        for s in containers[0].get("Secrets", [])
    ):
        problems.append("the pipeline's DATABASE_URL must come from Secrets Manager")
    if _getatt(definition.get("TaskRoleArn")) != ("PipelineTaskRole", "Arn"):
        problems.append("PipelineTaskDefinition must use PipelineTaskRole")

    readable = {
        _ref(resource)
        for statement in _statements(template, "PipelineExecutionRole")
        for resource in _listify(statement.get("Resource", []))
    }
    if readable != {"DatabaseUrlSecretArn"}:
        problems.append(f"PipelineExecutionRole must read DATABASE_URL only, reads {readable}")
    for statement in _statements(template, "PipelineTaskRole"):
        for resource in _listify(statement.get("Resource", [])):
            on_bucket = _getatt(resource) == ("ArchiveBucket", "Arn") or _sub_text(
                resource
            ).startswith("${ArchiveBucket.Arn}/archive/")
            if not on_bucket:
                problems.append(f"PipelineTaskRole reaches beyond the archive: {resource}")
        for action in _listify(statement.get("Action", [])):
            if not str(action).startswith("s3:") or "*" in str(action):
                problems.append(f"PipelineTaskRole grants more than S3 objects: {action}")

    schedule = _props(template, "PipelineArchiveSchedule")
    target = schedule.get("Target", {})
    ecs = target.get("EcsParameters", {})
    if (
        _getatt(target.get("Arn")) != ("Cluster", "Arn")
        or _ref(ecs.get("TaskDefinitionArn")) != "PipelineTaskDefinition"
    ):
        problems.append("the schedule must run PipelineTaskDefinition in the cluster")
    network = ecs.get("NetworkConfiguration", {}).get("AwsvpcConfiguration", {})
    if network.get("AssignPublicIp") != "DISABLED":
        problems.append("the pipeline task must not get a public IP")
    expression = template["Parameters"].get(_ref(schedule.get("ScheduleExpression")) or "", {})
    if not str(expression.get("Default", "")).startswith("cron(") or "* * ? *" not in str(
        expression.get("Default")
    ):
        problems.append("the archive must be scheduled daily")
    passed = {
        _getatt(resource)
        for statement in _statements(template, "PipelineSchedulerRole")
        if "iam:PassRole" in _listify(statement.get("Action"))
        for resource in _listify(statement.get("Resource", []))
    }
    if passed != {("PipelineExecutionRole", "Arn"), ("PipelineTaskRole", "Arn")}:
        problems.append(f"the scheduler may pass the pipeline's two roles only, passes {passed}")
    return problems


def test_the_daily_archive_keeps_its_promises() -> None:
    assert pipeline_problems(_template()) == []


def _set(path: list[str | int], value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(template: dict[str, Any]) -> None:
        node: Any = template
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return mutate


def _delete(path: list[str | int]) -> Callable[[dict[str, Any]], None]:
    def mutate(template: dict[str, Any]) -> None:
        node: Any = template
        for key in path[:-1]:
            node = node[key]
        node.pop(path[-1], None)

    return mutate


_COMMAND: list[str | int] = [
    "Resources",
    "PipelineTaskDefinition",
    "Properties",
    "ContainerDefinitions",
    0,
]
MUTATIONS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "bucket deletable": (_delete(["Resources", "ArchiveBucket", "DeletionPolicy"]), "retained"),
    "no versions": (
        _delete(["Resources", "ArchiveBucket", "Properties", "VersioningConfiguration"]),
        "keep versions",
    ),
    "always created": (_delete(["Resources", "PipelineTaskDefinition", "Condition"]), "Condition"),
    "a week old": (_set(["Parameters", "ArchiveOlderThan", "Default"], "7d"), "--older-than 1d"),
    "written elsewhere": (
        _set([*_COMMAND, "Command", 5], "s3a://someone-else/archive/"),
        "s3a://<ArchiveBucket>",
    ),
    "any bucket": (
        _set(
            [
                "Resources",
                "PipelineTaskRole",
                "Properties",
                "Policies",
                0,
                "PolicyDocument",
                "Statement",
                1,
                "Resource",
            ],
            "*",
        ),
        "beyond the archive",
    ),
    "public ip": (
        _set(
            [
                "Resources",
                "PipelineArchiveSchedule",
                "Properties",
                "Target",
                "EcsParameters",
                "NetworkConfiguration",
                "AwsvpcConfiguration",
                "AssignPublicIp",
            ],
            "ENABLED",
        ),
        "public IP",
    ),
    "reads every secret": (
        _set(
            [
                "Resources",
                "PipelineExecutionRole",
                "Properties",
                "Policies",
                0,
                "PolicyDocument",
                "Statement",
                0,
                "Resource",
            ],
            "*",
        ),
        "DATABASE_URL only",
    ),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_each_archive_promise_is_checked(mutation: str) -> None:
    mutate, expected = MUTATIONS[mutation]
    template = copy.deepcopy(_template())
    mutate(template)
    problems = pipeline_problems(template)
    assert any(expected in problem for problem in problems), problems
