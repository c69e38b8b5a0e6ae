"""Webhook target: the body of ``PUT /__admin/webhook``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

MIN_SIGNING_KEY_CHARS = 32  # upstream refuses shorter signing keys


def check_signing_key(value: SecretStr | None) -> SecretStr | None:
    if value is None or not value.get_secret_value():
        return None
    if len(value.get_secret_value()) < MIN_SIGNING_KEY_CHARS:
        raise ValueError(f"signing key must be at least {MIN_SIGNING_KEY_CHARS} characters")
    return value


def check_url(value: str | None) -> str | None:
    if value is None or not value.strip():
        return None
    if not value.startswith(("http://", "https://")):
        raise ValueError("webhook url must be http:// or https://")
    return value.strip()


class WebhookConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(None, description="notifications are off when unset")
    signing_key: SecretStr | None = Field(
        None, description="HMAC-SHA256 key for X-Signature; no header when unset"
    )

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return check_url(value)

    @field_validator("signing_key")
    @classmethod
    def _key(cls, value: SecretStr | None) -> SecretStr | None:
        return check_signing_key(value)
