"""The operator's dashboard in headless Chromium (Debian's, driven by Playwright): it loads
from the API alone, shows what the system holds after known submissions, and its switch
pauses the lane. The screenshot is kept in ``test-artifacts/`` (``RELAY_TEST_ARTIFACTS``).

``make test`` installs chromium when it can (root, apt); without it the test is skipped, except
where ``RELAY_REQUIRE_BROWSER`` is set (.ci/run sets it), where a missing browser fails it."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from api_testkit import DEAD

from relay_api.app import create_app
from relay_api.auth.service import create_client
from relay_api.settings import ApiSettings
from relay_core import controls, policy, pool
from relay_core.db.models import utcnow
from relay_devstack.localsqs import free_port

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(
    os.environ.get("RELAY_TEST_ARTIFACTS", Path(__file__).parents[3] / "test-artifacts")
)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("RELAY_REQUIRE_BROWSER"),
    reason="Debian's chromium is not installed (make pipeline-deps installs it)",
)


@pytest.fixture
async def served(
    api_settings: ApiSettings, queues: tuple[str, str]
) -> AsyncIterator[tuple[str, Any]]:
    """The app on a real port (a browser needs a URL), with its runtime."""
    app = create_app(api_settings)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.05)
    yield f"http://127.0.0.1:{port}", app.state.runtime
    server.should_exit = True
    await asyncio.wait_for(task, 30)


async def test_the_dashboard_shows_the_systems_state_and_its_switch_pauses_the_lane(
    served: tuple[str, Any], sqs: Any, queues: tuple[str, str]
) -> None:
    assert CHROMIUM is not None, "RELAY_REQUIRE_BROWSER is set and chromium is not installed"
    (ARTIFACTS / "dashboard.png").unlink(missing_ok=True)
    from playwright.async_api import async_playwright

    base, runtime = served
    async with runtime.sessions() as session, session.begin():
        _, admin = await create_client(session, "ops", role="admin")
        acme, client = await create_client(session, "acme")
        policy.apply(acme, {"allowedTo": []}, granted_by="the test")
        # a consumer's report, as one writes it every few seconds
        await controls.report(
            session,
            controls.Report("consumer-a", "normal", "running", 7, 120, "closed", utcnow()),
        )
    async with httpx.AsyncClient(base_url=base) as http:
        ids = []
        for _ in range(3):
            answer = await http.post(
                "/api/v1/relay/direct", json={"to": DEAD}, headers={"X-API-Key": client}
            )
            assert answer.status_code == 202
            ids.append(answer.json()["transactionId"])
    await sqs.send_message(
        QueueUrl=queues[1],
        MessageBody='{"schemaVersion": 1}',
        MessageAttributes={
            "deadLetterReason": {"DataType": "String", "StringValue": "executor rejected: nonce"},
            "deadLetterKind": {"DataType": "String", "StringValue": "permanent"},
        },
    )
    # the publisher sends after commit; wait until SQS has all three
    for _ in range(100):
        attributes = await sqs.get_queue_attributes(
            QueueUrl=queues[0], AttributeNames=["ApproximateNumberOfMessages"]
        )
        if attributes["Attributes"]["ApproximateNumberOfMessages"] == "3":
            break
        await asyncio.sleep(0.1)

    requested: list[str] = []
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        page = await browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("request", lambda request: requested.append(request.url))
        answer = await page.goto(f"{base}/api/v1/admin/dashboard")
        assert answer is not None
        assert answer.status == 200
        assert len(await answer.body()) < 20_000  # one small page, nothing else to load

        # A wrong key is refused and asked for again.
        await page.fill("#key", "rk_not_a_key")
        await page.click("#login-form button")
        await page.wait_for_selector("#login:not([hidden])")
        assert await page.text_content("#problem")

        await page.fill("#key", admin)
        await page.click("#login-form button")
        await page.wait_for_selector("body[data-loaded=true]")
        await page.wait_for_selector("#dlq-depth:not(:text('\u2013'))")

        assert await page.text_content("#accepted-total") == "3"
        shown = await page.eval_on_selector_all(
            "#transactions tr", "rows => rows.map(r => [r.dataset.transaction, r.dataset.status])"
        )
        assert sorted(shown) == sorted([tx_id, "pending"] for tx_id in ids)
        lane = page.locator("#lanes tr[data-lane=normal]")
        assert await lane.get_attribute("data-state") == "running"
        assert (await lane.locator("td").nth(2).text_content()) == "3"  # waiting in SQS
        assert (await lane.locator("td.oldest").text_content() or "").endswith(" s")
        fast = page.locator("#lanes tr[data-lane=fast]")
        assert await fast.locator("td.oldest").text_content() == "none"
        assert await page.text_content("#inflight-total") == "7"
        assert await page.text_content("#circuit") == "closed"
        assert await page.text_content("#dlq-depth") == "1"
        assert "executor rejected: nonce" in (await page.text_content("#dlq") or "")
        relayer = page.locator("#relayers tr[data-relayer=relayer-1]")
        assert await relayer.get_attribute("data-state") == "unknown"  # no consumer reported
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)

        await page.click("#lanes tr[data-lane=normal] button[data-action=paused]")
        await page.wait_for_selector("#lanes tr[data-lane=normal][data-state=paused]")
        await page.click("#relayers tr[data-relayer=relayer-1] button[data-action=paused]")
        await page.wait_for_selector("#relayers tr[data-relayer=relayer-1][data-state=paused]")
        await browser.close()

    async with runtime.sessions() as session:
        assert await controls.lane_state(session, "normal") is controls.LaneState.paused
        assert await pool.paused(session) == {"relayer-1"}
    assert all(url.startswith(base) for url in requested), requested
    assert (ARTIFACTS / "dashboard.png").stat().st_size > 20_000
