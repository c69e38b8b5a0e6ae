"""infra/cloudformation/relay.yaml: cfn-lint clean, and every property the deployment promises.

`infra_problems` reads the template the way a reviewer would and names each broken promise;
the mutation tests below remove or weaken one property at a time and check that it is noticed
(so none of these checks can silently pass).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cfnlint.decode import decode_str

from queue_consumer.retry import Policy, shortest_retry_span_s
from queue_consumer.settings import ConsumerSettings

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "infra" / "cloudformation" / "relay.yaml"

WORK_QUEUE = "TransactionQueue"
DLQ = "DeadLetterQueue"
FAST_QUEUE = "FastTransactionQueue"  # the fast lane: the same permissions on its own queues
FAST_DLQ = "FastDeadLetterQueue"
SECRET_NAMES = {
    "DATABASE_URL",
    "REDIS_URL",
    "RELAY_EXECUTOR_API_KEY",
    "EXECUTOR_API_KEY",
    "RELAY_WEBHOOK_SIGNING_KEY",
    "RELAY_DATABASE_URL",
    "RELAY_REDIS_URL",
    "RELAY_EXECUTOR_RELAYERS",  # the relayer pool holds each relayer's key
}
API_SECRETS = {"DATABASE_URL", "REDIS_URL", "RELAY_EXECUTOR_API_KEY", "RELAY_WEBHOOK_SIGNING_KEY"}
CONSUMER_SECRETS = {"DATABASE_URL", "REDIS_URL", "RELAY_EXECUTOR_API_KEY"}
API_ACTIONS = (
    {("sqs:SendMessage", WORK_QUEUE), ("sqs:GetQueueUrl", WORK_QUEUE)}
    | {("sqs:GetQueueAttributes", WORK_QUEUE)}
    | {  # the admin DLQ endpoints (relay_api/queues/dlq.py)
        (f"sqs:{action}", DLQ)
        for action in (
            "GetQueueUrl",
            "GetQueueAttributes",
            "ReceiveMessage",
            "ChangeMessageVisibility",
            "DeleteMessage",
            "PurgeQueue",
        )
    }
)
CONSUMER_ACTIONS = {
    ("sqs:ReceiveMessage", WORK_QUEUE),
    ("sqs:DeleteMessage", WORK_QUEUE),
    ("sqs:ChangeMessageVisibility", WORK_QUEUE),
    ("sqs:GetQueueAttributes", WORK_QUEUE),
    ("sqs:GetQueueUrl", WORK_QUEUE),
    ("sqs:SendMessage", WORK_QUEUE),
    ("sqs:SendMessage", DLQ),
    ("sqs:GetQueueUrl", DLQ),
    ("sqs:ReceiveMessage", DLQ),
    ("sqs:ChangeMessageVisibility", DLQ),
}


def _with_fast_lane(actions: set[tuple[str, str]]) -> set[tuple[str, str]]:
    twin = {WORK_QUEUE: FAST_QUEUE, DLQ: FAST_DLQ}
    return actions | {(action, twin[queue]) for action, queue in actions}


API_ACTIONS = _with_fast_lane(API_ACTIONS)
CONSUMER_ACTIONS = _with_fast_lane(CONSUMER_ACTIONS)
FARGATE_MAX_STOP_TIMEOUT_S = 120


def load_template() -> dict[str, Any]:
    template, matches = decode_str(TEMPLATE.read_text())
    assert not matches, matches
    assert template is not None
    return dict(template)


# --- reading intrinsic functions ------------------------------------------------------------


def if_set(items: list[Any]) -> list[tuple[Any, bool]]:
    """Each item, with whether it is optional: ``!If [Cond, item, !Ref AWS::NoValue]`` is the
    item when its condition holds (an optional secret)."""
    found = []
    for item in items:
        if isinstance(item, dict) and "Fn::If" in item:
            _, then, otherwise = item["Fn::If"]
            assert ref(otherwise) == "AWS::NoValue", item
            found.append((then, True))
        else:
            found.append((item, False))
    return found


def getatt(value: Any) -> tuple[str, str] | None:
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        target = value["Fn::GetAtt"]
        if isinstance(target, str):
            target = target.split(".", 1)
        return str(target[0]), str(target[1])
    return None


def ref(value: Any) -> str | None:
    if isinstance(value, dict) and "Ref" in value:
        return str(value["Ref"])
    return None


def resolve(template: dict[str, Any], value: Any) -> Any:
    """A literal, or the default of the parameter it refers to."""
    name = ref(value)
    if name is not None and name in template.get("Parameters", {}):
        return template["Parameters"][name].get("Default")
    return value


def mentions(value: Any, logical_id: str) -> bool:
    """True when an intrinsic expression refers to ``logical_id``."""
    if isinstance(value, dict):
        if ref(value) == logical_id or (getatt(value) or ("",))[0] == logical_id:
            return True
        if "Fn::Sub" in value:
            sub = value["Fn::Sub"]
            text = sub if isinstance(sub, str) else sub[0]
            if f"${{{logical_id}}}" in text or f"${{{logical_id}." in text:
                return True
        return any(mentions(item, logical_id) for item in value.values())
    if isinstance(value, list):
        return any(mentions(item, logical_id) for item in value)
    return False


def resources(template: dict[str, Any], type_: str) -> dict[str, dict[str, Any]]:
    return {
        name: resource
        for name, resource in template.get("Resources", {}).items()
        if resource.get("Type") == type_
    }


def props(template: dict[str, Any], logical_id: str) -> dict[str, Any]:
    return dict(template.get("Resources", {}).get(logical_id, {}).get("Properties", {}))


def listify(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def queue_of(value: Any) -> str:
    """The queue logical id an IAM resource points at ("*" for anything else)."""
    attribute = getatt(value)
    if attribute and attribute[1] == "Arn":
        return attribute[0]
    return "*"


def role_permissions(template: dict[str, Any], role: str) -> set[tuple[str, str]]:
    granted: set[tuple[str, str]] = set()
    for policy in props(template, role).get("Policies", []):
        for statement in policy["PolicyDocument"]["Statement"]:
            if statement.get("Effect") != "Allow":
                continue
            for action in listify(statement.get("Action", [])):
                for resource in listify(statement.get("Resource", [])):
                    granted.add((str(action), queue_of(resource)))
    return granted


def container(template: dict[str, Any], task_definition: str) -> dict[str, Any]:
    definitions = props(template, task_definition).get("ContainerDefinitions", [{}])
    return dict(definitions[0])


def environment(definition: dict[str, Any]) -> dict[str, Any]:
    return {item["Name"]: item["Value"] for item in definition.get("Environment", [])}


# --- the promises -----------------------------------------------------------------------------


_CONSUMER = ConsumerSettings(environment="test")  # the defaults the template runs with


def _policy(max_receive_count: int) -> Policy:
    return Policy(
        max_receive_count=max_receive_count,
        base_s=_CONSUMER.consumer_backoff_base_s,
        cap_s=_CONSUMER.consumer_backoff_cap_s,
    )


def queue_problems(template: dict[str, Any]) -> list[str]:
    problems = []
    work, dlq = props(template, WORK_QUEUE), props(template, DLQ)
    if not work or not dlq:
        return [f"the template must define {WORK_QUEUE} and {DLQ} (AWS::SQS::Queue)"]
    redrive = work.get("RedrivePolicy") or {}
    if getatt(redrive.get("deadLetterTargetArn")) != (DLQ, "Arn"):
        problems.append("work queue has no redrive policy to the DLQ (deadLetterTargetArn)")
    max_receive = resolve(template, redrive.get("maxReceiveCount"))
    if not isinstance(max_receive, int) or not 1 <= max_receive <= 1000:
        problems.append(f"redrive maxReceiveCount must be 1..1000, is {max_receive!r}")
    elif (span := shortest_retry_span_s(_policy(max_receive))) < (
        budget := _CONSUMER.consumer_retry_budget_s
    ):
        problems.append(
            f"redrive maxReceiveCount {max_receive} lets SQS dead-letter a message after "
            f"{span:.0f} s of back-off, inside the consumer's {budget:.0f} s retry budget"
        )
    work_retention = resolve(template, work.get("MessageRetentionPeriod"))
    dlq_retention = resolve(template, dlq.get("MessageRetentionPeriod"))
    if not isinstance(work_retention, int):
        problems.append("work queue MessageRetentionPeriod is not set")
    if dlq_retention != 1209600:
        problems.append("DLQ retention must be 14 days (1209600 s), the SQS maximum")
    if (
        isinstance(work_retention, int)
        and isinstance(dlq_retention, int)
        and dlq_retention <= work_retention
    ):
        problems.append("DLQ retention must be longer than the work queue's")
    if not isinstance(resolve(template, work.get("VisibilityTimeout")), int):
        problems.append("work queue VisibilityTimeout is not set")
    fast = props(template, FAST_QUEUE).get("RedrivePolicy") or {}
    if getatt(fast.get("deadLetterTargetArn")) != (FAST_DLQ, "Arn"):
        problems.append("the fast lane's queue has no redrive policy to its own DLQ")
    for name in (WORK_QUEUE, DLQ, FAST_QUEUE, FAST_DLQ):
        if template["Resources"].get(name, {}).get("DeletionPolicy") != "Retain":
            problems.append(f"{name} must have DeletionPolicy: Retain (it holds transactions)")
    return problems


def service_problems(template: dict[str, Any]) -> list[str]:
    problems = []
    clusters = resources(template, "AWS::ECS::Cluster")
    insights = [
        setting
        for cluster in clusters.values()
        for setting in cluster.get("Properties", {}).get("ClusterSettings", [])
        if setting.get("Name") == "containerInsights" and setting.get("Value") == "enabled"
    ]
    if not insights:
        problems.append("containerInsights must be enabled (RunningTaskCount drives scaling)")

    services = resources(template, "AWS::ECS::Service")
    for name in ("ApiService", "ConsumerService"):
        service = services.get(name, {}).get("Properties")
        if service is None:
            problems.append(f"{name} (AWS::ECS::Service) is missing")
            continue
        if service.get("LaunchType") != "FARGATE":
            problems.append(f"{name} must run on FARGATE")
        network = service.get("NetworkConfiguration", {}).get("AwsvpcConfiguration", {})
        if network.get("AssignPublicIp") != "DISABLED":
            problems.append(f"{name} tasks must not get a public IP")
        breaker = service.get("DeploymentConfiguration", {}).get("DeploymentCircuitBreaker", {})
        if not (breaker.get("Enable") and breaker.get("Rollback")):
            problems.append(f"{name} needs the deployment circuit breaker with rollback")

    api = services.get("ApiService", {}).get("Properties", {})
    balancers = api.get("LoadBalancers", [])
    if not balancers:
        problems.append("relay-api must be behind the ALB (LoadBalancers)")
    for balancer in balancers:
        group = props(template, ref(balancer.get("TargetGroupArn")) or "")
        if group.get("HealthCheckPath") != "/health":
            problems.append("the ALB target group must health-check GET /health")
        if group.get("TargetType") != "ip":
            problems.append("the target group must use TargetType ip (awsvpc tasks)")
    if not resources(template, "AWS::ElasticLoadBalancingV2::LoadBalancer"):
        problems.append("no application load balancer")
    return problems


def _scaling_policy_for(template: dict[str, Any], service: str) -> dict[str, Any] | None:
    targets = {
        name
        for name, target in resources(
            template, "AWS::ApplicationAutoScaling::ScalableTarget"
        ).items()
        if mentions(target.get("Properties", {}).get("ResourceId"), service)
    }
    for policy in resources(template, "AWS::ApplicationAutoScaling::ScalingPolicy").values():
        properties = policy.get("Properties", {})
        if ref(properties.get("ScalingTargetId")) in targets:
            return dict(properties)
    return None


def scaling_problems(template: dict[str, Any]) -> list[str]:
    problems = []
    api = _scaling_policy_for(template, "ApiService")
    api_metric = (
        (api or {})
        .get("TargetTrackingScalingPolicyConfiguration", {})
        .get("PredefinedMetricSpecification", {})
        .get("PredefinedMetricType")
    )
    if api_metric != "ECSServiceAverageCPUUtilization":
        problems.append("relay-api must scale on CPU (ECSServiceAverageCPUUtilization)")

    consumer = _scaling_policy_for(template, "ConsumerService") or {}
    config = consumer.get("TargetTrackingScalingPolicyConfiguration", {})
    metrics = config.get("CustomizedMetricSpecification", {}).get("Metrics", [])
    by_name: dict[str, str] = {}
    for metric in metrics:
        stat = metric.get("MetricStat", {}).get("Metric", {})
        dimensions = {d["Name"]: d["Value"] for d in stat.get("Dimensions", [])}
        if stat.get("MetricName") == "ApproximateNumberOfMessagesVisible" and mentions(
            dimensions.get("QueueName"), WORK_QUEUE
        ):
            by_name["visible"] = metric["Id"]
        if stat.get("MetricName") == "ApproximateNumberOfMessagesVisible" and mentions(
            dimensions.get("QueueName"), FAST_QUEUE
        ):
            by_name["fast"] = metric["Id"]
        if stat.get("MetricName") == "RunningTaskCount" and mentions(
            dimensions.get("ServiceName"), "ConsumerService"
        ):
            by_name["tasks"] = metric["Id"]
    expressions = [m.get("Expression", "") for m in metrics if m.get("ReturnData")]
    both = f"({by_name.get('visible')} + {by_name.get('fast')})"
    wanted = f"{both} / {by_name.get('tasks')}".replace(" ", "")
    if len(by_name) < 3 or [e.replace(" ", "") for e in expressions] != [wanted]:
        problems.append(
            "queue-consumer must scale on backlog per task: ApproximateNumberOfMessagesVisible"
            "(work queue + fast queue) / RunningTaskCount(consumer)"
        )
    if not isinstance(resolve(template, config.get("TargetValue")), int):
        problems.append("the backlog-per-task policy needs a numeric TargetValue")
    return problems


def task_problems(template: dict[str, Any]) -> list[str]:
    problems = []
    api = container(template, "ApiTaskDefinition")
    consumer = container(template, "ConsumerTaskDefinition")
    if not api or not consumer:
        return ["ApiTaskDefinition and ConsumerTaskDefinition must exist"]
    if consumer.get("StopTimeout") != FARGATE_MAX_STOP_TIMEOUT_S:
        problems.append("queue-consumer StopTimeout must be 120 s (drain before SIGKILL)")
    grace = float(environment(consumer).get("RELAY_CONSUMER_GRACE_S", "110"))
    if grace >= float(consumer.get("StopTimeout") or 0):
        problems.append("RELAY_CONSUMER_GRACE_S must be shorter than the consumer StopTimeout")
    if "/health" not in " ".join(api.get("HealthCheck", {}).get("Command", [])):
        problems.append("relay-api container health check must call /health")
    if "--check" not in consumer.get("HealthCheck", {}).get("Command", []):
        problems.append("queue-consumer container health check must run `queue-consumer --check`")

    for name, definition, expected in (
        ("relay-api", api, API_SECRETS),
        ("queue-consumer", consumer, CONSUMER_SECRETS),
    ):
        env = environment(definition)
        leaked = sorted(SECRET_NAMES & set(env))
        if leaked:
            problems.append(f"{name}: secrets in plain environment: {leaked}")
        for key, value in env.items():
            if isinstance(value, str) and "://" in value and "@" in value:
                problems.append(f"{name}: {key} looks like a URL with credentials")
        secrets = {
            item["Name"]: (item["ValueFrom"], optional)
            for item, optional in if_set(definition.get("Secrets", []))
        }
        missing = sorted(expected - set(secrets))
        if missing:
            problems.append(f"{name}: not from Secrets Manager: {missing}")
        for key, (value_from, optional) in secrets.items():
            parameter = template.get("Parameters", {}).get(ref(value_from) or "", {})
            # A required secret has no default; an optional one defaults to none at all.
            if "secretsmanager" not in parameter.get("AllowedPattern", "") or (
                "Default" in parameter and not (optional and parameter["Default"] == "")
            ):
                problems.append(f"{name}: {key} must come from a Secrets Manager ARN parameter")
        if env.get("RELAY_ENV") != "production":
            problems.append(f"{name}: RELAY_ENV must be production")
        if not mentions(env.get("RELAY_QUEUE_NAME"), WORK_QUEUE) or not mentions(
            env.get("RELAY_DLQ_NAME"), DLQ
        ):
            problems.append(f"{name}: RELAY_QUEUE_NAME / RELAY_DLQ_NAME must name the queues")
    return problems


def iam_problems(template: dict[str, Any]) -> list[str]:
    problems = []
    for task_definition, role, expected in (
        ("ApiTaskDefinition", "ApiTaskRole", API_ACTIONS),
        ("ConsumerTaskDefinition", "ConsumerTaskRole", CONSUMER_ACTIONS),
    ):
        if getatt(props(template, task_definition).get("TaskRoleArn")) != (role, "Arn"):
            problems.append(f"{task_definition} must use {role}")
        role_props = props(template, role)
        if role_props.get("ManagedPolicyArns"):
            problems.append(f"{role} must not attach managed policies")
        granted = role_permissions(template, role)
        extra = sorted(granted - expected)
        missing = sorted(expected - granted)
        if extra:
            problems.append(f"{role} grants more than it needs: {extra}")
        if missing:
            problems.append(f"{role} lacks what the code calls: {missing}")

    for task_definition, role in (
        ("ApiTaskDefinition", "ApiExecutionRole"),
        ("ConsumerTaskDefinition", "ConsumerExecutionRole"),
    ):
        if getatt(props(template, task_definition).get("ExecutionRoleArn")) != (role, "Arn"):
            problems.append(f"{task_definition} must use {role}")
        wanted = {
            ref(item["ValueFrom"])
            for item, _ in if_set(container(template, task_definition).get("Secrets", []))
        }
        readable: set[str | None] = set()
        for policy in props(template, role).get("Policies", []):
            for statement in policy["PolicyDocument"]["Statement"]:
                for resource, _ in if_set(listify(statement.get("Resource", []))):
                    readable.add(ref(resource) if isinstance(resource, dict) else resource)
        if readable != wanted:
            problems.append(f"{role} must read exactly its task's secrets, reads {readable}")
    return problems


def datastore_problems(template: dict[str, Any]) -> list[str]:
    problems = []
    created = [
        name
        for name, resource in template.get("Resources", {}).items()
        if resource.get("Type", "").startswith(("AWS::RDS::", "AWS::ElastiCache::"))
    ]
    if created:
        problems.append(f"RDS / ElastiCache are referenced as parameters, not created: {created}")
    for parameter in ("DatabaseSecurityGroupId", "RedisSecurityGroupId"):
        if parameter not in template.get("Parameters", {}):
            problems.append(f"parameter {parameter} is missing")
        ingress = [
            r
            for r in resources(template, "AWS::EC2::SecurityGroupIngress").values()
            if ref(r.get("Properties", {}).get("GroupId")) == parameter
        ]
        if len(ingress) < 2:
            problems.append(f"both services must be allowed into {parameter}")
    return problems


def alarm_problems(template: dict[str, Any]) -> list[str]:
    problems = []
    alarms = [
        a.get("Properties", {}) for a in resources(template, "AWS::CloudWatch::Alarm").values()
    ]

    def on(alarm: dict[str, Any], metric: str, queue: str) -> bool:
        dimensions = {d["Name"]: d["Value"] for d in alarm.get("Dimensions", [])}
        return (
            alarm.get("Namespace") == "AWS/SQS"
            and alarm.get("MetricName") == metric
            and mentions(dimensions.get("QueueName"), queue)
        )

    dlq_depth = [a for a in alarms if on(a, "ApproximateNumberOfMessagesVisible", DLQ)]
    if not any(
        resolve(template, a.get("Threshold")) == 0
        and a.get("ComparisonOperator") == "GreaterThanThreshold"
        for a in dlq_depth
    ):
        problems.append("no alarm on DLQ depth > 0")
    for queue, lane in ((WORK_QUEUE, "work queue"), (FAST_QUEUE, "fast lane's queue")):
        if not any(on(a, "ApproximateAgeOfOldestMessage", queue) for a in alarms):
            problems.append(f"no alarm on the {lane}'s oldest-message age")
    if not any(on(a, "ApproximateNumberOfMessagesVisible", FAST_DLQ) for a in alarms):
        problems.append("no alarm on the fast lane's DLQ depth")
    problems += _heartbeat_problems(template, alarms)
    return problems


# The consumer's log line these alarms read (queue_consumer.worker.Consumer._heartbeat_file).
HEARTBEAT_EVENT = '"consumer.heartbeat"'


def _heartbeat_problems(template: dict[str, Any], alarms: list[dict[str, Any]]) -> list[str]:
    """Heartbeat missing and circuit open: alarms on metrics the consumer's heartbeat log
    lines make through metric filters on its log group; and a dashboard with the panels."""
    problems = []
    made: dict[str, str] = {}  # metric name -> the filter pattern that makes it
    for f in resources(template, "AWS::Logs::MetricFilter").values():
        props = f.get("Properties", {})
        if ref(props.get("LogGroupName")) != "ConsumerLogGroup":
            continue
        for t in props.get("MetricTransformations", []):
            made[str(t.get("MetricName"))] = str(props.get("FilterPattern", ""))

    def pattern(alarm: dict[str, Any]) -> str:
        return made.get(str(alarm.get("MetricName")), "")

    heartbeat = [
        a
        for a in alarms
        if HEARTBEAT_EVENT in pattern(a)
        and "circuit" not in pattern(a)
        and a.get("ComparisonOperator") == "LessThanThreshold"
        and a.get("TreatMissingData") == "breaching"
    ]
    if not heartbeat:
        problems.append(
            "no alarm on missing consumer heartbeats (a metric filter on the consumer's log "
            "group, missing data breaching)"
        )
    circuit = [
        a
        for a in alarms
        if HEARTBEAT_EVENT in pattern(a)
        and "$.circuit" in pattern(a)
        and a.get("ComparisonOperator") == "GreaterThanThreshold"
    ]
    if not circuit:
        problems.append("no alarm on an executor circuit open for long")
    dashboards = resources(template, "AWS::CloudWatch::Dashboard")
    body = json.dumps([d.get("Properties", {}).get("DashboardBody") for d in dashboards.values()])
    for needed in ("ApproximateAgeOfOldestMessage", "ConsumerHeartbeats", DLQ, WORK_QUEUE):
        if needed not in body:
            problems.append(f"no CloudWatch dashboard panel with {needed}")
    return problems


PUBLIC_PATHS = {"/api/v1/*", "/health"}
ADMIN_PATHS = {"/api/v1/admin/*"}


def _priority(rule: dict[str, Any]) -> int:
    return int(rule.get("Properties", {}).get("Priority", 0))


def admin_plane_problems(template: dict[str, Any]) -> list[str]:
    """The admin plane is not forwarded from the internet (DESIGN invariant 8): a rule that
    answers /api/v1/admin/* itself comes before the public API's, and any rule that forwards
    those paths comes before it and only from the operators' CIDRs."""
    rules = resources(template, "AWS::ElasticLoadBalancingV2::ListenerRule")
    public = [_priority(r) for r in rules.values() if _paths(r) == PUBLIC_PATHS]
    closed = [
        _priority(rule)
        for rule in rules.values()
        if _paths(rule) == ADMIN_PATHS
        and all(a.get("Type") == "fixed-response" for a in rule["Properties"].get("Actions", []))
    ]
    problems = []
    if not closed or not public or min(closed) >= min(public):
        problems.append(
            "no rule refuses /api/v1/admin/* before the public API's rule: the admin plane "
            "would be forwarded from the internet"
        )
    for name, rule in rules.items():
        forwards = any(a.get("Type") == "forward" for a in rule["Properties"].get("Actions", []))
        if not forwards or _paths(rule) != ADMIN_PATHS:
            continue
        conditions = rule["Properties"].get("Conditions", [])
        if not any(c.get("Field") == "source-ip" for c in conditions):
            problems.append(f"{name} forwards the admin plane from anywhere")
    return problems


def _paths(rule: dict[str, Any]) -> set[str]:
    found: set[str] = set()
    for condition in rule.get("Properties", {}).get("Conditions", []):
        found |= set(condition.get("PathPatternConfig", {}).get("Values", []))
    return found


def exposure_problems(template: dict[str, Any]) -> list[str]:
    """The internet-facing listeners forward only the public API: /metrics, /ready, /docs
    and /openapi.json are not routed (DESIGN §2 invariant 8; the guard issue); the admin plane
    only from the operators' networks."""
    problems = admin_plane_problems(template)
    for name, listener in resources(template, "AWS::ElasticLoadBalancingV2::Listener").items():
        for action in listener.get("Properties", {}).get("DefaultActions", []):
            if action.get("Type") == "forward":
                problems.append(f"{name} forwards every path by default: route the API only")
    forwarded: set[str] = set()
    for name, rule in resources(template, "AWS::ElasticLoadBalancingV2::ListenerRule").items():
        properties = rule.get("Properties", {})
        if not any(a.get("Type") == "forward" for a in properties.get("Actions", [])):
            continue
        if not _paths(rule):
            problems.append(f"{name} forwards without a path condition")
        if _paths(rule) != ADMIN_PATHS:  # (the operators' rule: admin_plane_problems)
            forwarded |= _paths(rule)
    if forwarded != PUBLIC_PATHS:
        problems.append(
            f"the ALB must forward exactly {sorted(PUBLIC_PATHS)}, forwards {sorted(forwarded)}"
        )
    return problems


def infra_problems(template: dict[str, Any]) -> list[str]:
    return [
        *exposure_problems(template),
        *queue_problems(template),
        *service_problems(template),
        *scaling_problems(template),
        *task_problems(template),
        *iam_problems(template),
        *datastore_problems(template),
        *alarm_problems(template),
    ]


# --- tests --------------------------------------------------------------------------------


def test_cfn_lint_passes_including_informational_rules() -> None:
    result = subprocess.run(
        [
            str(Path(sys.executable).parent / "cfn-lint"),
            "--include-checks",
            "I",
            "--",
            str(TEMPLATE),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_template_keeps_every_deployment_promise() -> None:
    assert infra_problems(load_template()) == []


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


def _container(task: str) -> list[str | int]:
    return ["Resources", task, "Properties", "ContainerDefinitions", 0]


def _database_url_in_env(template: dict[str, Any]) -> None:
    definition = template["Resources"]["ApiTaskDefinition"]["Properties"]
    definition["ContainerDefinitions"][0]["Environment"].append(
        {"Name": "DATABASE_URL", "Value": "mysql://relay:hunter2@db:3306/relay"}
    )


def _grant_receive_to_api(template: dict[str, Any]) -> None:
    policy = template["Resources"]["ApiTaskRole"]["Properties"]["Policies"][0]
    policy["PolicyDocument"]["Statement"][0]["Action"].append("sqs:ReceiveMessage")


def _wildcard_consumer(template: dict[str, Any]) -> None:
    policy = template["Resources"]["ConsumerTaskRole"]["Properties"]["Policies"][0]
    policy["PolicyDocument"]["Statement"][1]["Resource"] = "*"


def _consumer_on_cpu(template: dict[str, Any]) -> None:
    config = template["Resources"]["ConsumerBacklogScalingPolicy"]["Properties"][
        "TargetTrackingScalingPolicyConfiguration"
    ]
    del config["CustomizedMetricSpecification"]
    config["PredefinedMetricSpecification"] = {
        "PredefinedMetricType": "ECSServiceAverageCPUUtilization"
    }


def _create_rds(template: dict[str, Any]) -> None:
    template["Resources"]["Database"] = {"Type": "AWS::RDS::DBInstance", "Properties": {}}


MUTATIONS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "redrive removed": (
        _delete(["Resources", WORK_QUEUE, "Properties", "RedrivePolicy"]),
        "redrive policy",
    ),
    "redrive inside the retry budget": (
        _set(["Parameters", "QueueMaxReceiveCount", "Default"], 3),
        "inside the consumer's",
    ),
    "everything routed": (
        _set(
            ["Resources", "HttpsListener", "Properties", "DefaultActions"],
            [{"Type": "forward", "TargetGroupArn": {"Ref": "ApiTargetGroup"}}],
        ),
        "forwards every path",
    ),
    "admin plane open to the internet": (
        _delete(["Resources", "AdminPlaneClosedRule"]),
        "admin plane would be forwarded",
    ),
    "admin plane forwarded from anywhere": (
        _set(
            ["Resources", "OperatorAdminRule", "Properties", "Conditions"],
            [{"Field": "path-pattern", "PathPatternConfig": {"Values": ["/api/v1/admin/*"]}}],
        ),
        "forwards the admin plane from anywhere",
    ),
    "metrics routed": (
        _set(
            [
                "Resources",
                "PublicApiRule",
                "Properties",
                "Conditions",
                0,
                "PathPatternConfig",
                "Values",
            ],
            ["/api/v1/*", "/health", "/metrics"],
        ),
        "must forward exactly",
    ),
    "dlq retention too short": (
        _set(["Resources", DLQ, "Properties", "MessageRetentionPeriod"], 86400),
        "DLQ retention",
    ),
    "queue deletable": (_delete(["Resources", WORK_QUEUE, "DeletionPolicy"]), "Retain"),
    "consumer stop timeout": (
        _set([*_container("ConsumerTaskDefinition"), "StopTimeout"], 30),
        "StopTimeout",
    ),
    "health check path": (
        _set(["Resources", "ApiTargetGroup", "Properties", "HealthCheckPath"], "/"),
        "GET /health",
    ),
    "database url in env": (_database_url_in_env, "plain environment"),
    "api can receive": (_grant_receive_to_api, "ApiTaskRole grants more"),
    "consumer wildcard": (_wildcard_consumer, "ConsumerTaskRole grants more"),
    "api cannot resolve queue url": (
        _set(
            ["Resources", "ApiTaskRole", "Properties", "Policies", 0, "PolicyDocument"],
            {
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Action": ["sqs:SendMessage"],
                        "Resource": {"Fn::GetAtt": [WORK_QUEUE, "Arn"]},
                    }
                ]
            },
        ),
        "lacks what the code calls",
    ),
    "consumer scales on cpu": (_consumer_on_cpu, "backlog per task"),
    "api not scaled": (_delete(["Resources", "ApiCpuScalingPolicy"]), "scale on CPU"),
    "no container insights": (
        _delete(["Resources", "Cluster", "Properties", "ClusterSettings"]),
        "containerInsights",
    ),
    "no dlq alarm": (_delete(["Resources", "DeadLetterQueueDepthAlarm"]), "DLQ depth"),
    "no age alarm": (_delete(["Resources", "OldestMessageAgeAlarm"]), "oldest-message age"),
    "no fast age alarm": (
        _delete(["Resources", "FastOldestMessageAgeAlarm"]),
        "fast lane's queue's oldest-message age",
    ),
    "fast queue without redrive": (
        _delete(["Resources", FAST_QUEUE, "Properties", "RedrivePolicy"]),
        "its own DLQ",
    ),
    "no heartbeat alarm": (
        _delete(["Resources", "ConsumerHeartbeatMissingAlarm"]),
        "missing consumer heartbeats",
    ),
    "heartbeat alarm quiet when nothing logs": (
        _set(
            ["Resources", "ConsumerHeartbeatMissingAlarm", "Properties", "TreatMissingData"],
            "notBreaching",
        ),
        "missing consumer heartbeats",
    ),
    "heartbeat filter on another event": (
        _set(
            ["Resources", "ConsumerHeartbeatMetricFilter", "Properties", "FilterPattern"],
            '{ $.event = "consumer.stopped" }',
        ),
        "missing consumer heartbeats",
    ),
    "no circuit alarm": (_delete(["Resources", "CircuitOpenAlarm"]), "circuit open for long"),
    "no dashboard": (_delete(["Resources", "OperationsDashboard"]), "CloudWatch dashboard"),
    "rds created": (_create_rds, "referenced as parameters"),
    "public ip": (
        _set(
            [
                "Resources",
                "ConsumerService",
                "Properties",
                "NetworkConfiguration",
                "AwsvpcConfiguration",
                "AssignPublicIp",
            ],
            "ENABLED",
        ),
        "public IP",
    ),
    "execution role reads any secret": (
        _set(
            [
                "Resources",
                "ConsumerExecutionRole",
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
        "exactly its task's secrets",
    ),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_each_promise_is_checked(mutation: str) -> None:
    mutate, expected = MUTATIONS[mutation]
    template = copy.deepcopy(load_template())
    mutate(template)
    problems = infra_problems(template)
    assert any(expected in problem for problem in problems), problems
