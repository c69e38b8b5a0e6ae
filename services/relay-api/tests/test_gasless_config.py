"""Gasless is on only with a forwarder and a chain id; its domain is served for clients to sign
for; the nonce needs a chain to ask."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from api_testkit import TEST_FORWARDER, signed_gasless
from pydantic import SecretStr, ValidationError

from relay_api.runtime import Runtime
from relay_api.settings import ApiSettings
from relay_core import ethereum


def test_a_forwarder_without_a_chain_id_or_the_other_way_round_refuses_to_start(
    infra_env: dict[str, Any],
) -> None:
    for half in ({"forwarder_address": TEST_FORWARDER}, {"chain_id": 1}):
        with pytest.raises(ValidationError, match="RELAY_FORWARDER_ADDRESS and RELAY_CHAIN_ID"):
            ApiSettings(**infra_env, **half)
    assert ApiSettings(**infra_env).forwarder_domain is None


async def test_the_domain_clients_sign_for_is_served_and_verifies_their_signatures(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    response = await client.get("/api/v1/relay/gasless/domain", headers={"X-API-Key": api_key})
    assert response.status_code == 200
    served = response.json()
    assert served["domain"] == {
        "name": "ERC2771Forwarder",
        "version": "1",
        "chainId": 31337,
        "verifyingContract": TEST_FORWARDER,
    }
    assert served["primaryType"] == "ForwardRequest"
    # A request signed for exactly that domain is accepted.
    domain = ethereum.ForwarderDomain(
        served["domain"]["name"],
        served["domain"]["version"],
        served["domain"]["chainId"],
        served["domain"]["verifyingContract"],
    )
    body = signed_gasless(runtime.settings, domain=domain)
    accepted = await client.post("/api/v1/relay/gasless", json=body, headers={"X-API-Key": api_key})
    assert accepted.status_code == 202, accepted.text


async def test_the_nonce_needs_a_chain_to_ask(client: httpx.AsyncClient, api_key: str) -> None:
    response = await client.get(
        f"/api/v1/relay/gasless/nonce/{TEST_FORWARDER}", headers={"X-API-Key": api_key}
    )
    assert response.status_code == 503
    assert "RELAY_CHAIN_RPC_URL" in response.json()["detail"]


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {}


class TestGaslessOff:
    @pytest.fixture
    def settings_overrides(self) -> dict[str, Any]:
        return {"chain_id": None, "forwarder_address": None}

    async def test_gasless_requests_are_refused_with_what_to_configure(
        self, client: httpx.AsyncClient, api_key: str
    ) -> None:
        body = signed_gasless(
            ApiSettings(chain_id=31337, forwarder_address=TEST_FORWARDER, environment="test")
        )
        response = await client.post(
            "/api/v1/relay/gasless", json=body, headers={"X-API-Key": api_key}
        )
        assert response.status_code == 404
        assert "RELAY_FORWARDER_ADDRESS" in response.json()["detail"]
        domain = await client.get("/api/v1/relay/gasless/domain", headers={"X-API-Key": api_key})
        assert domain.status_code == 404


@pytest.mark.parametrize(
    "key", ["short-key", "changeme", "webhook-local-key-CHANGE-ME-0123456789abcdef"]
)
def test_production_refuses_a_weak_or_placeholder_webhook_key(
    infra_env: dict[str, Any], key: str
) -> None:
    settings = ApiSettings(
        **{**infra_env, "environment": "production"},
        webhook_signing_key=key,
        executor_api_key="a-real-executor-key-0123456789abcdef",
    )
    with pytest.raises(SystemExit, match="RELAY_WEBHOOK_SIGNING_KEY"):
        settings.check_production_secrets()
    strong = settings.model_copy(update={"webhook_signing_key": SecretStr("k" * 16 + "9f" * 12)})
    strong.check_production_secrets()
