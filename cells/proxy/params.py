"""``params`` of a ``proxy`` cell (meclaw's ``ProxyParams``).

No message ever echoes ``bot_token``: a bad token is described, never quoted.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

SUPPORTED_PLATFORMS = ("telegram",)

MUTABLE_KEYS = (
    "base_url",
    "long_poll_timeout_ms",
    "long_poll_request_secs",
    "send_timeout_ms",
    "query_timeout_ms",
)
"""Keys a ``params`` body slot may change at runtime (persisted in ``cell.db``)."""
IMMUTABLE_KEYS = ("platform", "bot_token", "emit_to")
"""The bot's identity and its routing: fixed for the cell's life."""

_TOKEN_CHARS = re.compile(r"^[^\s/?#]+$")


class ProxyParams(BaseModel):
    # meclaw's parser skips keys it does not read; the loader warns about each.
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)

    platform: str = "telegram"
    """The chat platform; only ``telegram`` is implemented."""
    bot_token: str = Field(repr=False)
    """The token BotFather issued, usually ``"${TELEGRAM_BOT_TOKEN}"``."""
    emit_to: str
    """The target of every source emission (routing still follows the out-edges)."""
    long_poll_request_secs: Annotated[int, Field(ge=0)] = 30
    """Telegram-side wait of one ``getUpdates`` (its ``timeout``); 0 is short polling."""
    long_poll_timeout_ms: Annotated[int, Field(ge=1, validate_default=True)] = 35_000
    """Client-side read timeout of one ``getUpdates``; must exceed the Telegram-side wait."""
    send_timeout_ms: Annotated[int, Field(ge=1)] = 10_000
    """Wall clock of one ``sendMessage`` (each part of a split answer gets its own)."""
    query_timeout_ms: Annotated[int, Field(ge=1)] = 5_000
    """Wall clock of one ``cell.db`` operation (cursor and params writes)."""
    base_url: str = "https://api.telegram.org"
    """The Bot API root; requests go to ``{base_url}/bot{token}/{method}``."""

    @field_validator("platform")
    @classmethod
    def _platform(cls, value: str) -> str:
        if value not in SUPPORTED_PLATFORMS:
            raise PydanticCustomError(
                "unsupported_platform",
                "platform '{platform}' is not supported by this build; supported: {supported}",
                {"platform": value, "supported": ", ".join(SUPPORTED_PLATFORMS)},
            )
        return value

    @field_validator("bot_token")
    @classmethod
    def _token(cls, value: str) -> str:
        if not value.strip():
            raise PydanticCustomError(
                "empty_bot_token",
                "bot_token is empty; set it to the token BotFather issued "
                '(e.g. "${TELEGRAM_BOT_TOKEN}" with the variable in .env)',
            )
        if not _TOKEN_CHARS.match(value):
            raise PydanticCustomError(
                "invalid_bot_token",
                "bot_token contains whitespace, '/', '?' or '#'; a Telegram token never does",
            )
        return value

    @field_validator("emit_to")
    @classmethod
    def _emit_to(cls, value: str) -> str:
        if not value.strip():
            raise PydanticCustomError(
                "empty_emit_to", "emit_to is empty; name the target of inbound messages"
            )
        return value

    @field_validator("long_poll_timeout_ms")
    @classmethod
    def _tripwire(cls, value: int, info: ValidationInfo) -> int:
        secs = info.data.get("long_poll_request_secs")
        if isinstance(secs, int) and value <= secs * 1000:
            raise PydanticCustomError(
                "long_poll_tripwire",
                "long_poll_timeout_ms ({timeout}) must be greater than "
                "long_poll_request_secs * 1000 ({wait}): the client would cut its own long poll",
                {"timeout": value, "wait": secs * 1000},
            )
        return value

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise PydanticCustomError(
                "invalid_base_url",
                "base_url must be an http:// or https:// URL (got '{url}')",
                {"url": value},
            )
        return value.rstrip("/")

    def merged(self, update: dict[str, Any]) -> ProxyParams:
        """These params with ``update`` (mutable keys only) applied, validated as a whole."""
        data = self.model_dump()
        data.update(update)
        return ProxyParams.model_validate(data)
