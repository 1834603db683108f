"""Every setting in one place. Each is a command-line flag (`--db`) and an environment
variable (`DURABLE_RESPONSES_DB`); flags win over the environment, which wins over the
defaults below."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

LogLevel = Literal["debug", "info", "warning", "error"]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="DURABLE_RESPONSES_",
        cli_kebab_case=True,
        cli_implicit_flags=True,
        cli_prog_name="durable-responses",
        cli_exit_on_error=True,
        extra="ignore",
    )

    host: str = Field("127.0.0.1", description="address to listen on")
    port: int = Field(8000, ge=0, le=65535, description="port to listen on (0: any free port)")
    db: Path = Field(Path("data/responses.db"), description="SQLite file of the store")
    agent: str | None = Field(
        None, description="custom agent or workflow handler to host, as module:attribute"
    )
    log_level: LogLevel = Field("info", description="logging level")

    max_body_bytes: int = Field(
        8 * 1024 * 1024, ge=1024, description="largest request body accepted, in bytes"
    )
    embedded_words: int = Field(
        10, ge=1, le=100_000, description="words in an answer of the embedded model"
    )
    embedded_delay_ms: float = Field(
        0.0, ge=0, le=60_000, description="pause between the embedded model's deltas"
    )

    lease_ttl: float = Field(10.0, gt=0, description="seconds a runner's lease lasts")
    poll_interval: float = Field(
        0.25, gt=0, description="seconds between event-log polls of a live stream"
    )
    cancel_wait: float = Field(
        10.0, ge=0, description="seconds a cancel waits for a running turn to stop"
    )
    keepalive: float = Field(
        15.0, gt=0, description="seconds of silence before a stream sends a keep-alive comment"
    )
