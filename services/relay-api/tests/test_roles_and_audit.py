"""Safe by default: a new client's key spends nothing until an admin grants it a policy; admin
and operator keys manage and never submit; an operator reads and steers but changes no
policy and purges nothing; every admin or operator action is in the audit log with who did
it, readable by admins and operators only."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Any

import httpx
import pytest
from api_testkit import DEAD, count_rows

from relay_api.runtime import Runtime

POLICY = {
    "allowedTo": [DEAD],
    "maxValueWei": "1000",
    "dailyValueWei": "5000",
    "maxGas": 100_000,
}


def _headers(key: str) -> dict[str, str]:
    return {"X-API-Key": key}


async def _direct(client: httpx.AsyncClient, key: str, **body: Any) -> httpx.Response:
    return await client.post(
        "/api/v1/relay/direct",
        json={"to": DEAD, "value": "1", "gasLimit": "50000", **body},
        headers=_headers(key),
    )


async def test_a_new_client_spends_nothing_until_an_admin_grants_it_a_policy(
    client: httpx.AsyncClient, runtime: Runtime, new_key: Any
) -> None:
    key = await new_key("newcomer", granted=False)
    admin = await new_key("ops", role="admin")
    refused = await _direct(client, key)
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"] == "policy_refused"
    assert refused.json()["detail"].startswith("policy noPolicy: ")
    assert await count_rows(runtime) == 0

    shown = await client.get("/api/v1/admin/clients/newcomer", headers=_headers(admin))
    assert shown.json()["policy"]["granted"] is False

    granted = await client.patch(
        "/api/v1/admin/clients/newcomer", json=POLICY, headers=_headers(admin)
    )
    assert granted.status_code == 200, granted.text
    policy = granted.json()["policy"]
    assert (policy["granted"], policy["unlimited"]) == (True, False)
    assert policy["grantedBy"] == "ops (admin)"
    assert (await _direct(client, key)).status_code == 202
    refused = await _direct(client, key, value="1001")
    assert refused.json()["detail"].startswith("policy maxValueWei: ")


async def test_a_rate_limit_alone_grants_nothing(client: httpx.AsyncClient, new_key: Any) -> None:
    key = await new_key("limited", granted=False)
    admin = await new_key("ops", role="admin")
    changed = await client.patch(
        "/api/v1/admin/clients/limited",
        json={"rateLimitPerS": 5.0, "rateLimitBurst": 10},
        headers=_headers(admin),
    )
    assert changed.json()["policy"]["granted"] is False
    assert (await _direct(client, key)).status_code == 403


@pytest.mark.parametrize("role", ["admin", "operator"])
async def test_admin_and_operator_keys_manage_and_do_not_submit(
    client: httpx.AsyncClient, runtime: Runtime, new_key: Any, role: str
) -> None:
    key = await new_key("staff", role=role)
    for path, body in (
        ("/api/v1/relay/direct", {"to": DEAD}),
        ("/api/v1/relay/gasless", {"request": {}, "signature": "0x"}),
    ):
        answer = await client.post(path, json=body, headers=_headers(key))
        if path.endswith("direct"):  # (the gasless body is refused by its schema first)
            assert answer.status_code == 403, answer.text
            assert answer.json()["error"] == "forbidden"
            assert "does not submit" in answer.json()["detail"]
    assert await count_rows(runtime) == 0


async def test_an_operator_reads_and_steers_but_changes_no_policy_and_purges_nothing(
    client: httpx.AsyncClient, new_key: Any
) -> None:
    await new_key("acme")
    operator = _headers(await new_key("watch", role="operator"))
    for path in (
        "/api/v1/admin/clients/acme",
        "/api/v1/admin/queues",
        "/api/v1/admin/dlq",
        "/api/v1/admin/activity",
        "/api/v1/admin/audit",
    ):
        answer = await client.get(path, headers=operator)
        assert answer.status_code == 200, f"{path}: {answer.text}"
    paused = await client.patch(
        "/api/v1/admin/queues/normal", json={"state": "paused"}, headers=operator
    )
    assert paused.status_code == 200, paused.text
    changed = await client.patch(
        "/api/v1/admin/clients/acme", json={"maxValueWei": "1"}, headers=operator
    )
    assert changed.status_code == 403
    purged = await client.delete("/api/v1/admin/dlq", params={"confirm": "x"}, headers=operator)
    assert purged.status_code == 403


async def test_every_admin_and_operator_action_is_in_the_audit_log(
    client: httpx.AsyncClient, new_key: Any
) -> None:
    acme = await new_key("acme", granted=False)
    admin_key = await new_key("ops", role="admin")
    operator_key = await new_key("watch", role="operator")
    await client.patch("/api/v1/admin/clients/acme", json=POLICY, headers=_headers(admin_key))
    await client.patch(
        "/api/v1/admin/queues/fast",
        json={"state": "paused", "reason": "maintenance"},
        headers=_headers(operator_key),
    )
    page = await client.get("/api/v1/admin/audit", headers=_headers(admin_key))
    assert page.status_code == 200, page.text
    newest, granted = page.json()["entries"][:2]
    assert newest["action"] == "lane.pause"
    assert newest["actor"]["name"] == "watch"
    assert newest["actor"]["role"] == "operator"
    assert newest["target"] == {"kind": "lane", "id": None, "name": "fast"}
    assert newest["before"] == {"state": "running"}
    assert newest["after"] == {"state": "paused", "reason": "maintenance"}
    assert granted["action"] == "client.change"
    assert granted["actor"]["name"] == "ops"
    assert granted["target"]["name"] == "acme"
    assert granted["before"]["policy"]["granted"] is False
    assert granted["after"]["policy"]["maxValueWei"] == "1000"

    refused = await client.get("/api/v1/admin/audit", headers=_headers(acme))
    assert refused.status_code == 403
    older = await client.get(
        "/api/v1/admin/audit", params={"limit": 1}, headers=_headers(admin_key)
    )
    cursor = older.json()["nextCursor"]
    rest = await client.get(
        "/api/v1/admin/audit", params={"cursor": cursor}, headers=_headers(admin_key)
    )
    assert rest.json()["entries"][0]["action"] == "client.change"


def _relay(database_url: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "relay_api.cli", *args],
        env={**os.environ, "DATABASE_URL": database_url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_one_command_makes_a_usable_client_and_the_audit_names_the_command(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    url = runtime.settings.database_url
    bare = _relay(url, "keys", "create", "--name", "bare")
    assert "may submit nothing until it is granted a spend policy" in bare
    made = _relay(
        url,
        "keys",
        "create",
        "--name",
        "payer",
        "--allow-to",
        DEAD,
        "--max-value",
        "1000",
        "--max-gas",
        "100000",
    )
    key = made.strip().splitlines()[-1]
    assert (await _direct(client, key)).status_code == 202
    assert (await _direct(client, bare.strip().splitlines()[-1])).status_code == 403
    shown = _relay(url, "clients", "show", "payer")
    assert "policy        granted" in shown
    listing = _relay(url, "keys", "list")
    assert any(line.split()[4:6] == ["NONE", "bare"] for line in listing.splitlines())
    trail = _relay(url, "audit", "--limit", "10")
    assert re.search(r"client\.change +client payer ", trail), trail
    assert "by relay command, " in trail


async def test_the_dashboard_runs_no_inline_script(client: httpx.AsyncClient) -> None:
    # Its code is a same-origin file, so the policy can refuse every inline script: markup
    # injected into the page (a client's name, a transaction's error) cannot run code.
    page = await client.get("/api/v1/admin/dashboard")
    assert page.status_code == 200
    policy = dict(
        directive.strip().split(" ", 1)
        for directive in page.headers["Content-Security-Policy"].split(";")
    )
    assert policy["script-src"] == "'self'"
    assert policy["default-src"] == "'none'"
    scripts = re.findall(r"<script\b([^>]*)>(.*?)</script>", page.text, flags=re.S)
    assert scripts, "the page loads its script"
    assert all('src="' in attributes and not body.strip() for attributes, body in scripts)
    code = await client.get("/api/v1/admin/dashboard.js")
    assert code.status_code == 200
    assert code.headers["content-type"].startswith("text/javascript")
    assert "fetch(" in code.text
